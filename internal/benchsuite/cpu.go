package benchsuite

import (
	"sync"
	"testing"
	"time"
)

// cpuStarts holds, for each benchmark run, the CPU time this process had
// used when its measured part began (resetTimer). The process's CPU is
// everything baton's stack does for the benchmark: the benchmarks run the
// store, the embedded NATS server and the GitHub simulator in-process.
var cpuStarts sync.Map // *testing.B → time.Duration

// resetTimer is b.ResetTimer that also starts counting the process's CPU
// time, which reportRate turns into CPU per op.
func resetTimer(b *testing.B) {
	if t, ok := processCPU(); ok {
		cpuStarts.Store(b, t)
	}
	b.ResetTimer()
}

// reportCPU reports the process's CPU time (user plus system, every
// goroutine's) per op since resetTimer, in microseconds ("cpu-µs/op"): on
// a machine of C CPUs, no more than C s / that figure ops can run a
// second, however the work is spread.
func reportCPU(b *testing.B) {
	start, ok := cpuStarts.LoadAndDelete(b)
	if !ok || b.N == 0 {
		return
	}
	now, ok := processCPU()
	if !ok {
		return
	}
	b.ReportMetric(float64((now-start.(time.Duration)).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
}
