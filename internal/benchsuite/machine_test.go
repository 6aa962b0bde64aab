package benchsuite

import (
	"fmt"
	"testing"
)

// procStat writes a /proc/stat of cpus CPUs whose "cpu" line has busy
// ticks of user time and idle ticks idle.
func procStat(cpus int, busy, idle int64) string {
	s := fmt.Sprintf("cpu  %d 0 0 %d 0 0 0 0 0 0\n", busy, idle)
	for i := range cpus {
		s += fmt.Sprintf("cpu%d %d 0 0 %d 0 0 0 0 0 0\n", i, busy/int64(cpus), idle/int64(cpus))
	}
	return s + "intr 1 2 3\nctxt 4\ncpu_weird 5\n"
}

// Other CPU is of the whole machine: on 4 CPUs, others busy for half of
// all the ticks kept 2 CPUs busy, whatever runtime.NumCPU says (1 under
// taskset -c 0, or in a container's cpuset).
func TestOthersCPUCountsEveryCPU(t *testing.T) {
	t.Parallel()
	sample := func(stat string, self int64) machineSample {
		busy, total, cpus, ok := parseProcStat(stat)
		if !ok {
			t.Fatalf("parseProcStat refused %q", stat)
		}
		return machineSample{busy: busy, total: total, cpus: cpus, self: self, available: true}
	}
	before := sample(procStat(4, 1000, 3000), 100)
	// 400 ticks later on each of the 4 CPUs (1600 in all): 1000 busy, 200
	// of them this process's, so 800 (half of 1600) others'.
	after := sample(procStat(4, 2000, 3600), 300)
	if before.cpus != 4 {
		t.Errorf("%d CPUs counted, want 4", before.cpus)
	}
	if got := othersCPU(before, after); got != 2 {
		t.Errorf("other CPU %v, want 2", got)
	}
	if _, _, _, ok := parseProcStat("intr 1\n"); ok {
		t.Error("a /proc/stat without a cpu line was read")
	}
}
