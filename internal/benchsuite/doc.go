// Package benchsuite holds baton's benchmarks as plain functions, so that
// the same code runs under `go test -bench` (the wrappers in suite_test.go)
// and in `baton bench --suite`, which runs them with testing.Benchmark and
// prints the table docs/PERFORMANCE.md shows.
//
// # What is measured
//
// Each benchmark builds its own stack from the packages' exported APIs —
// a real SQLite file with synchronous=FULL in a temporary directory, the
// embedded NATS JetStream server, the GitHub simulator over real HTTP —
// and measures one thing:
//
//   - store: durable Create from one caller and from 32 concurrent callers
//     (group commit), Get by operation ID, and List of 50 records;
//   - leases: acquire+release pairs, 32 holders on distinct keys and 8
//     holders contending for one key;
//   - queue: acknowledged publishes one at a time, and a no-op handler fed
//     from 32 concurrent publishers (end to end through JetStream);
//   - github: the GitHub call of a comment operation alone, through the
//     executor's go-github client and installation transport on the
//     simulator, from 32 concurrent callers;
//   - executor: operations carried out end to end (durable submit,
//     JetStream, 32 workers taking leases on 200 resources, the simulator
//     answering at once, pacing off, fenced saves);
//   - HTTP: submissions over real HTTP from 32 concurrent clients, through
//     authentication, validation, the durable write and the queue.
//
// Every benchmark reports its throughput as ops/s (what one op is, is
// said in Benchmark.Op), the CPU time the process used per op (everything
// runs in it: baton's stack, the embedded NATS server, the simulator), and,
// where one op's latency is measured, its p50 and p99 in milliseconds. They are benchmarks, not tests: nothing is
// asserted about the figures.
//
// # Use
//
//	results, err := benchsuite.Run(benchsuite.Options{Benchtime: "2s"})
//	benchsuite.WriteTable(os.Stdout, results)
package benchsuite
