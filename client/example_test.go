package client_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"

	"github.com/ipclab/logagg/client"
)

// Example sends two records through log/slog to a unix socket listener that
// stands in for the aggregator, and prints what the listener received.
func Example() {
	dir, _ := os.MkdirTemp("", "lg")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "log.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	received := make(chan string)
	go func() {
		c, err := l.Accept()
		if err != nil {
			close(received)
			return
		}
		defer c.Close()
		sc := bufio.NewScanner(c)
		for sc.Scan() {
			received <- sc.Text()
		}
		close(received)
	}()

	w, err := client.Dial("unix://"+path, client.WithSource("producer-1"))
	if err != nil {
		fmt.Println(err)
		return
	}
	logger := slog.New(client.NewHandler(w, nil))
	logger.Info("user logged in", "user", "ann", "attempt", 2)
	logger.WithGroup("http").Warn("slow request", "path", "/api", "ms", 870)
	w.Close()

	for line := range received {
		var rec map[string]any
		json.Unmarshal([]byte(line), &rec)
		delete(rec, "timestamp") // changes every run
		out, _ := json.Marshal(rec)
		fmt.Println(string(out))
	}
	// Output:
	// {"attempt":2,"level":"INFO","message":"user logged in","source":"producer-1","user":"ann"}
	// {"http":{"ms":870,"path":"/api"},"level":"WARN","message":"slow request","source":"producer-1"}
}
