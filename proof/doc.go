// Package proof checks baton's promises the way users meet them: a real
// `baton serve` process, killed and restarted; a real NATS server, killed
// and restarted; a GitHub simulator that drops connections after applying
// requests, answers 500 and 429; floods of forged requests; and every API
// route tried by every kind of caller. The package has no code of its own
// beyond this page: it is its tests.
//
// # What is proved
//
// TestCrash builds the baton binary, runs the GitHub simulator in the test
// process with faults on every route baton mutates through (10% of
// connections dropped after the mutation was applied, 5% answered 500,
// 0.5% answered 429 with Retry-After) and 5% of 500s on the routes its
// probes read, and runs `baton serve` against it as a
// child process. Sixteen clients submit 2,000 operations (comments, labels,
// merges, fast-forward ref updates, commit statuses) over 50 resources,
// retrying each submission with its idempotency key while the server is
// unreachable, while the test kills the server with SIGKILL five times and
// restarts it on the same data directory. When everything has settled it
// checks, and reports:
//
//   - lost: every operation that was answered 201 or 200 exists and is
//     terminal;
//   - duplicates: no pull request was merged twice, no ref update applied
//     twice, no comment posted twice (the simulator's effect log and the
//     hidden marker each comment carries);
//   - agreement: what GitHub shows (comments, labels, merges, where each
//     branch points) agrees with what each record says happened — except
//     where a record says it could not tell (its last probe failed);
//   - one writer: no two mutating calls on one resource overlapped in time
//     (the simulator's effect log records when each arrived and ended);
//   - nothing held: no lease is left held — every row of the leases
//     table is read, not only the workload's keys —, and the dead-letter
//     stream is empty.
//
// With -short it runs 300 operations and two kills.
//
// TestBrokerFaults runs the same workload (600 operations) with an external
// nats-server (`--nats`), killed with SIGKILL and restarted twice: once
// while the clients submit, once while the operations are carried out
// (when a counted share of them is still queued or running). Each time it
// stays away longer than baton's 5 s publish timeout, so no publish waits
// it out. Submissions made while the broker is away are accepted (the
// record store is the source of truth) and published once it is back — by
// the reconciler, or by the executor when the operation before them on
// their resource finishes. The test checks that neither kill came when
// there was nothing to do, that submissions were accepted while the broker
// was away, that the reconciler published operations again (baton's
// /metrics), and, as above, that nothing accepted is lost and nothing is
// applied twice. With -short it runs 200 operations. CI must have
// nats-server installed; elsewhere the test is skipped without it.
//
// TestLastAttemptAppliedButAnswerLost pins what the crash test found first:
// an operation whose last allowed attempt is applied by GitHub but whose
// answer is lost must probe before it gives up, so that its record says
// succeeded — GitHub has the comment — and a client is not led to post it
// again.
//
// TestLeaseCheckReadsEveryLease checks TestCrash's and TestBrokerFaults'
// "nothing held" check itself: it reads the whole leases table, so a lease
// held on a key outside the workload's resources is found, and a released
// one is not.
//
// TestHostileRequests sends 1,000 concurrent webhook deliveries with bad
// signatures and 1,000 API requests with missing, forged, malformed or
// revoked tokens to a running server: nothing changes in the database
// (operations, deliveries, leases, tokens), and a valid request right after
// is served promptly.
//
// TestAccessMatrix tries every API route with no token, a revoked token,
// another actor's token, a token of another installation, the owner's token
// and an admin token, and checks the documented answer each time.
//
// # Reports
//
// TestCrash and TestBrokerFaults log their reports and, when the
// environment variable BATON_PROOF_REPORT names a file, append them to it;
// .ci/run prints that file after the test run, so the figures appear in the
// CI log.
package proof
