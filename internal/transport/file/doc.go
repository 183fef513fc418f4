// Package file is the file input (scheme "file"): it tails the files that
// match a path or a glob, file:///var/log/app.log or
// file:///var/log/nginx/*.log?from=start, and turns each line into a record
// (docs/transports.md lists the parameters; docs/adr/0055 says why it is
// built this way).
//
// # Identity
//
// A file is known by its device and inode and by a fingerprint (CRC-64) of
// its first bytes, up to 256 (fewer while the file is shorter, extended as
// it grows). The inode alone is not enough: a deleted file's inode is
// handed out again at once, and a file read up to offset N would be
// resumed at N in a new file that is shorter, or has other content. The
// fingerprint tells them apart, and also finds content that moved to
// another inode: copytruncate's copy starts with the same bytes as the
// file it was copied from.
//
//   - rename and create: the renamed file keeps its inode and its
//     fingerprint; an open descriptor reads it to its end; the new file at
//     the path is new, read from its start.
//   - copytruncate: the truncated file no longer starts with its
//     fingerprint (or is shorter than the offset): its new content is read
//     from the start, and the old content becomes an orphan, which the
//     copy, if the glob matches it, adopts: the copy is read from where the
//     original was left. A copy that shows up while the original is still
//     intact waits (copyGrace) rather than being read from its start.
//   - deletion: an open descriptor still reads the file; once it has left
//     its path it is closed rotate_wait after its last byte.
//   - a recycled inode (deleted, and a new file got the inode): the
//     fingerprint differs, the file is new.
//   - an empty file has no fingerprint yet: it is taken on once it has
//     bytes (a copy being written must not be read as a new file).
//
// # Delivery and the checkpoint
//
// The checkpoint (transport.CheckpointPath, one file per input, next to a
// lock so two aggregators never share one) lists every file's identity and
// the offset up to which its records are written, and orphans. The offset
// moves only when the sink's Completer says the records up to a mark are
// written to every output they were routed to (or dropped by a rule): the
// input marks each file's records with a sequence number (Emitter.Done)
// after reading them, Written stores the highest mark, and the loop moves
// each file's committed offset and saves the checkpoint
// (checkpoint_interval, write, fsync, rename, fsync the directory) from a
// goroutine of its own, so an fsync never stalls reading. A SIGKILL loses
// nothing: what follows the checkpoint is read again (duplicates, at most
// about checkpoint_interval worth of input). Records being put together
// (a multi-line record, a container's partial line, an unterminated last
// line) hold the checkpoint back to their first byte.
//
// A file seen the first time is read from its end (from=end, the default)
// or its start (from=start) only on the input's first run, when there is
// no checkpoint yet. Once there is one, a file the checkpoint does not
// know appeared since: it is read from its start, also when that happened
// while the aggregator was down.
//
// # Resources
//
// One goroutine reads every file of an input, and one more saves its
// checkpoints: no goroutine or thread per file. It waits on one inotify
// descriptor (watches on directories, never on files, so 10,000 files in
// one directory cost one watch) through Go's poller, and rescans the glob
// every scan interval, which is the authority on which files exist:
// inotify only brings the next look forward (its queue can overflow, and
// network file systems send nothing). With watch=poll it rescans only.
// Files are read with pread at their offset into one shared buffer; per
// file it keeps a few dozen bytes of state, plus a record being put
// together, whose buffer counts against the budget for incomplete records
// that stream connections share (Deps.Partial): past it the largest held
// record is written out early, flagged truncated, and its rest follows
// flagged continuation. At most max_open files are open; the least recently used one
// that is read to its end and still at its path is closed for another and
// opened again by its identity (the path must still name its inode, and
// the inode start with its fingerprint). A file that left its path is not
// closed before it is read to its end: it could not be opened again.
//
// # Records
//
// A line is a record (only a newline ends one: a NUL does not, unlike the
// stream framing of sockets). Lines longer than the maximum record size
// are cut into pieces flagged truncated and continuation; an unterminated
// last line waits partial_timeout for its newline, then is written flagged
// partial. Container runtimes' formats (format=docker, format=cri, or
// detected from a file's first line) are decoded: the program's bytes are
// the record, the stream goes to agg.stream, the runtime's timestamp to
// agg.source_time, and partial lines (CRI's P, Docker's 16 KiB pieces) are put
// back together. multiline=java|python|go or multiline_start=REGEX join
// lines into one record, bounded by multiline_max_lines, the maximum
// record size and multiline_timeout. Every record carries its file's path
// as agg.file (record.Meta.File).
//
// # Bad input
//
// Problems with a file are logged once per cause and counted in
// logagg_decode_errors_total with kind file_CAUSE: permission_denied (a
// file the aggregator may not read is reported, and never read another
// way; a file whose permission is taken away while it is open is read on
// through the descriptor opened while it was allowed, as the kernel
// permits, until it is closed, and reported when it is opened again),
// vanished, symlink_loop, not_regular (a FIFO or device matched by
// the glob is never opened for reading), read_error, binary (NUL bytes in
// its first bytes; its lines are still records, flagged). Records with bad
// bytes are kept and flagged as on every input (invalid_utf8, nul_bytes,
// control_chars), and so are the records around them.
//
// # Lifecycle
//
// New validates the URL, takes the checkpoint's lock and loads it; it
// opens no file. Run reads until ctx ends, then hands over what it read,
// waits (at most shutdownWait) until that is written, saves the final
// checkpoint and returns; at the hard stop it stops at once. Close
// releases the lock.
package file
