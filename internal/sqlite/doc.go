// Package sqlite opens baton's SQLite database and owns the way it is
// written: one writer connection that groups the writes of concurrent
// callers into one transaction (group commit), and a pool of read
// connections.
//
// # Why a package of its own
//
// The operation store (package executor) and the lease coordinator (package
// coordinator) keep their tables in the same database file, because a write
// made under a lease must check the lease in the same transaction
// ("fenced writes"). Both therefore need the same writer; this package is
// that writer, and neither of them owns the other's tables. It applies the
// migrations package schema embeds when the database is opened.
//
// # Durability
//
// The database runs in WAL mode with synchronous=FULL by default: when
// [DB.Write] returns nil, the write has been fsynced and survives a process
// kill or a power cut. Other processes may open the same file; writers
// serialize with BEGIN IMMEDIATE and a busy timeout.
//
// # Group commit
//
// A durable single-row transaction costs one fsync, which caps a lone
// writer at a few thousand transactions a second. [DB.Write] hands the
// caller's function to the writer goroutine, which runs every function
// waiting at that moment inside one transaction, each in its own SAVEPOINT:
// a function that fails rolls back only its own changes, and the others
// commit together with one fsync. A caller learns the outcome of its own
// function only once the whole transaction has committed. Functions given
// to Write run on the writer goroutine and must not block on anything but
// the transaction they are given.
package sqlite
