// Package queue is baton's durable delivery of operations on NATS
// JetStream: the embedded server, the streams, publishing, the consume
// loop, dead letters and the reconciler. It knows nothing of what an
// operation is: it carries operation IDs and hands them to a Handler.
//
// # What it owns
//
//   - A Broker: nats-server embedded in the process by default (JetStream
//     store in <data>/nats, no listening socket unless Config.ListenAddr,
//     an in-process client connection), or an external server or cluster
//     (Config.URL, with credentials, NKey and TLS files, and stream
//     Replicas).
//   - Two streams, created or updated at Start without losing stored
//     messages: OPERATIONS (work-queue retention, file storage, subjects
//     baton.operations.<id>, dedupe window Config.DuplicateWindow, at least
//     2 minutes) and OPERATIONS_DLQ (limits retention, subjects
//     baton.dlq.<id>). The message body is the operation ID; every operation
//     has its own subject, so a stream can be asked whether it holds a
//     message for one operation.
//   - Broker.Dispatch, which the executor's Dispatcher interface names: it
//     publishes with Nats-Msg-Id set to the operation ID and returns once
//     JetStream has acknowledged the message. The executor marks its record
//     dispatched after Dispatch returns (an outbox).
//   - A Consumer: a durable pull consumer (explicit ack, Config.AckWait,
//     unlimited deliveries) feeding ConsumerConfig.Concurrency handlers.
//   - Dead letters (Broker.DeadLetters, ReplayDeadLetter, RemoveDeadLetter,
//     PurgeDeadLetters) and a Reconciler.
//
// # Guarantees
//
// The record store is the source of truth; the streams only deliver. An
// operation accepted by the store reaches the handler at least once: a
// failed or lost publish, a message deleted from the stream, a crash of
// baton (SIGKILL included) or of an external server delays it, and the
// reconciler or a redelivery brings it back. It may reach the handler more
// than once (a redelivery after a lost acknowledgement, a reconciler racing
// a dispatch); the executor makes that safe, acknowledging an operation that
// is already terminal and sending back one whose resource is held.
//
// The same operation dispatched twice within the dedupe window is stored
// once. Every other message baton stores (a retry after a failure, a dead
// letter, a replay, a republish) has a message ID of its own, so the dedupe
// window never swallows it; and the ones a crash could make baton repeat
// (retry, dead letter, replay) take their ID from the sequence of the
// message they replace, so a repetition within the dedupe window is stored
// once. One later than that (a redelivery after a long AckWait, a second
// replay minutes after the first) stores a second message for the same
// operation; the executor finds its record terminal or its resource held,
// so the operation still runs once.
//
// After a crash, a message that was in a handler's hands is delivered again
// within about AckWait of the restart (sooner if the consumer's state had
// not reached the disk). While a handler runs, the consumer sends
// JetStream an in-progress signal every AckWait/3, so a long operation is
// not delivered twice. AckWait (default 60 s) must exceed the executor's
// lease TTL (30 s by default, at most 5 minutes), so that the redelivery
// after a crash finds the dead holder's lease expired.
//
// Messages are pulled only for idle handlers: a message's AckWait starts
// when a handler is ready for it.
//
// # How it is used
//
//	b, _ := queue.New(queue.Config{DataDir: dataDir, Logger: log})
//	_ = b.Start(ctx)                   // server, connection, streams
//	exec := executor.New(..., b)       // b.Dispatch is the executor's Dispatcher
//	c, _ := queue.NewConsumer(b, queue.ConsumerConfig{
//		Handler: func(ctx context.Context, id string) queue.Result {
//			return asQueueResult(exec.Process(ctx, id)) // the wiring's adapter
//		},
//	})
//	_ = c.Start(ctx)
//	r, _ := queue.NewReconciler(b, queue.ReconcilerConfig{
//		Candidates:     store.DispatchCandidates,
//		MarkDispatched: store.MarkDispatched,
//	})
//	_ = r.Start(ctx)
//	...
//	_ = b.Stop(shutdownCtx)            // stops r and c, drains, stops the server
//
// The handler returns Done (acknowledge: the operation completed, whatever
// its outcome), RetryAfter(d) (resource busy, provider wait: delivered
// again after d, never counted as a failure) or Failed(err) (the consumer
// could not process it: store down, a bug; a panic in the handler is
// recovered and counts as Failed).
//
// Broker.Ready and Consumer.Ready are for /readyz; Broker.Stats gives the
// counters to export as metrics (names in the Stats fields).
//
// # Failure counting
//
// JetStream counts every delivery, and a busy resource may send an operation
// back a thousand times; only handler failures may lead to the dead-letter
// stream. So the failure count travels with the message, in the header
// Baton-Failures, and survives restarts with it:
//
//   - On a failure, the consumer stores a copy of the message in OPERATIONS
//     carrying the new count, the end of its backoff (Baton-Retry-At:
//     FailureBackoff doubling per failure up to MaxFailureBackoff) and the
//     reason (Baton-Reason), then acknowledges the original. A copy
//     delivered before its backoff ends is nak'ed with the time left,
//     without calling the handler. (Time left beyond MaxFailureBackoff
//     means the wall clock was set back since the copy was stored: the
//     copy then waits MaxFailureBackoff once, not the length of the step.)
//   - At MaxFailures (default 5) it stores a dead letter in OPERATIONS_DLQ
//     (the operation ID, the count, the reason) instead, then acknowledges
//     the original: the operation leaves OPERATIONS.
//   - RetryAfter naks the message with the delay, at most MaxHold (a
//     minute); the count is untouched. A message sent back before and
//     stored MaxHold ago or earlier is replaced by a copy at the stream's
//     end instead (its failure headers kept; the original acknowledged
//     once the copy is stored), delivered at once: JetStream frees storage
//     only behind a stream's oldest message, which must not stay for days.
//     (Sent back before: the age is the server's timestamp read by this
//     machine's clock, and a server behind it would make every copy look
//     old; each message still waits out one delay.)
//   - If the copy or dead letter cannot be stored, the original is nak'ed
//     with the backoff and this failure is not counted: a failure is never
//     counted without being recorded.
//   - The copy is stored before the original is acknowledged, so an
//     operation is always in one of the streams.
//
// ReplayDeadLetter puts the operation back into OPERATIONS with no failures
// counted and then removes the dead letter. PurgeDeadLetters removes them
// all; an operation whose record is not terminal is then published again by
// the reconciler, so cancel operations before purging their dead letters.
//
// # Reconciler
//
// The Reconciler takes two functions from the wiring, since it cannot see
// the store: Candidates(ctx, dispatchedBefore, limit), the operations that
// should be in the stream (queued, or running without a live lease) whose
// last dispatch is older than dispatchedBefore or never happened; and
// MarkDispatched(ctx, ids, at). Every Interval (default 30 s, first pass at
// Start) it asks for candidates older than MinAge (default 1 minute) and,
// for each, asks OPERATIONS and then OPERATIONS_DLQ whether they hold a
// message on the operation's subject. Present in OPERATIONS: it is waiting
// there (a held resource, a provider wait, a failure backoff) and is left
// alone, so waiting operations never pile up duplicates. Present in
// OPERATIONS_DLQ: it waits for an operator. In neither: it is published
// again under a message ID of its own. Every settled candidate is marked
// dispatched, so the next page of candidates moves on. A pass asks for
// candidates again until none come, MaxPerPass is reached or something
// fails: a store may return fewer than the limit after leaving out running
// operations whose worker is alive. A lost message thus delays an
// operation by up to MinAge plus Interval; it never loses it.
//
// # Shutdown
//
// Consumer.Stop (and Broker.Stop, which stops the consumers and reconcilers
// built on it first) stops fetching, lets running handlers finish until the
// context's deadline, then cancels the handlers' context, naks what they
// still hold so it is redelivered at once after a restart, and returns the
// context's error; a handler that ignores its context does not hold Stop
// past ConsumerConfig.StopGrace. The broker then drains its connection and
// shuts the embedded server down, waiting for it to finish.
//
// # Durability and operations
//
// The embedded server uses JetStream's default flush policy: a publish is
// acknowledged once written to the operating system, so a crash of baton
// loses nothing, and the store's synchronous=FULL plus the reconciler cover
// a crash of the machine. Config.SyncAlways (--nats-sync always) fsyncs
// every write for operators who want the stream durable on its own. With
// Config.ListenAddr the embedded server accepts clients, so the nats CLI
// can inspect the streams. Against an external server, baton reconnects
// forever; publishes fail at once while it is away (nothing is buffered),
// and the caller sees the error.
package queue
