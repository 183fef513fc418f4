// Package all registers every listener transport: import it for its side
// effects (import _ ".../internal/transport/all") where listeners are opened
// by URL.
package all

import (
	_ "github.com/ipclab/logagg/internal/transport/fifo"       // fifo://
	_ "github.com/ipclab/logagg/internal/transport/file"       // file:///var/log/*.log
	_ "github.com/ipclab/logagg/internal/transport/journal"    // journal://, journal:///dir
	_ "github.com/ipclab/logagg/internal/transport/mq"         // mq:///name
	_ "github.com/ipclab/logagg/internal/transport/otlp"       // otlp://, otlphttp://, otlp+unix://, otlphttp+unix://
	_ "github.com/ipclab/logagg/internal/transport/shm"        // shm:///control.sock
	_ "github.com/ipclab/logagg/internal/transport/stdin"      // stdin://
	_ "github.com/ipclab/logagg/internal/transport/tcp"        // tcp://
	_ "github.com/ipclab/logagg/internal/transport/udp"        // udp://
	_ "github.com/ipclab/logagg/internal/transport/unixgram"   // unixgram://
	_ "github.com/ipclab/logagg/internal/transport/unixstream" // unix://
)
