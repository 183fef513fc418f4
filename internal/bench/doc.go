// Package bench holds what every ipcbench subcommand shares: the JSON result
// envelope (Result, Host, Calibration), the sample statistics (Summarize),
// the common command-line flags (Common, ParseSize, and ParseCount with
// CountVar for every flag that counts things), the aligned terminal
// tables (Table, and TitledTable as each kind's Tables returns them,
// printed by WriteTables) and the stderr progress bar (Progress).
//
// Measuring and rendering are kept apart: a subcommand measures, fills a
// Result and writes it with WriteJSON; `ipcbench report` reads it back with
// ReadResult and renders it without measuring again. Rows and Params are
// kind-specific; ReadResult decodes them into values supplied by the caller.
//
// Concurrency: Summarize, ParseSize, ParseCount and the table printer are
// pure functions. A Progress may be updated from one measuring goroutine
// while its own goroutine draws; nothing else in this package is safe for
// concurrent use.
package bench
