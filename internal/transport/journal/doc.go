// Package journal is the systemd journal input (scheme "journal"):
//
//	journal://                            the system journal, as journalctl reads it
//	journal:///var/log/journal/remote     the journal files in a directory (journalctl --directory)
//	journal://?unit=ssh.service&match=PRIORITY=3    only what journalctl --unit and its matches select
//	journal://?from=start                 a first run reads the whole journal (default end: from now on)
//
// Each entry becomes one record (render.go: message, level, source,
// timestamp, a "syslog" object like a syslog record's, the other fields
// under "journal", the sender's pid/uid/gid in agg.peer with via
// "journal"); agg.transport is "journal".
//
// # Reading
//
// The listener runs `journalctl --output=export --follow
// --after-cursor=C` and decodes its output (export.go; ADR 0056 says why
// a child and not sd-journal through cgo or a reader of the file
// format). journalctl is systemd's own reader: it follows new and
// rotated files, decompresses, and survives files truncated under it
// (its SIGBUS handler), in a process of its own. It is forked from a
// locked OS thread with Pdeathsig, so it dies with the aggregator; its
// standard error is logged line by line; when it ends or writes what is
// not the export format it is killed, reaped and started again after
// the last entry read, with back-off (100 ms doubling to 30 s, reset
// after a minute of health). Before every read of its output the
// Emitter hands its records over, so none waits in a batch while the
// journal is quiet; a full queue stops the reading and, through the
// pipe, journalctl: the journal keeps what is not read. An entry whose
// fields do not add up to the hash in its cursor was read while it was
// being written, and is read again by cursor (verify.go).
//
// # Checkpoint
//
// The cursor of the last entry written to every output it was routed
// to (or dropped on purpose by a rule) is kept in one file in the state
// directory (transport.CheckpointPath, and a lock beside it: one
// aggregator per journal and state directory). Each entry's mark is
// given to Done; the Emitter hands the marks over with the batches that
// hold the entries, and the writers call Written once those are written.
// The saver turns the highest written mark into the cursor of the entry
// it covers and saves it (temp file, fsync, rename, fsync of the
// directory) at most once a second, and once more when Run ends. A
// checkpoint therefore never passes an entry that was not written:
// killed at any moment, the aggregator reads again at most the entries
// of the last second, never fewer (at least once). The output's own
// fsync policy decides what survives a power cut.
//
// # Lifetimes and concurrency
//
// New validates the URL and takes the lock; Run, called once, reads
// until ctx ends (journalctl is then killed: nothing it held is lost,
// the journal keeps it), hands over what it read, waits for the writers
// to confirm it or for the hard stop, saves the checkpoint and returns;
// Close releases the lock and is safe after Run. Run's goroutine owns
// the Emitter; a watcher goroutine (files.go) keeps the file gauges and
// reports unreadable files with an Emitter of its own; a saver goroutine
// saves the checkpoint. Written is called from the writers' goroutines
// and only stores a number.
package journal
