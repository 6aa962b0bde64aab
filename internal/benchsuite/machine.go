package benchsuite

import (
	"os"
	"strconv"
	"strings"
)

// machineSample is what /proc says of the machine at one moment: the load
// average, the CPU time every process has used, and this process's.
type machineSample struct {
	load1     string // 1-minute load average; "" where unknown
	busy      int64  // CPU ticks not idle, all processes
	total     int64  // CPU ticks, all
	cpus      int    // CPUs the ticks are of: every CPU of the machine
	self      int64  // CPU ticks of this process (user + system)
	available bool
}

// LoadAverage returns the 1, 5 and 15 minute load averages as
// /proc/loadavg writes them ("0.61", "1.40", "2.00"); nil where it cannot
// be read.
func LoadAverage() []string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return nil
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return nil
	}
	return f[:3]
}

func sampleMachine() machineSample {
	var s machineSample
	if load := LoadAverage(); load != nil {
		s.load1 = load[0]
	}
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s
	}
	var ok bool
	if s.busy, s.total, s.cpus, ok = parseProcStat(string(stat)); !ok {
		return s
	}
	self, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return s
	}
	// The command name may hold spaces; fields resume after its ')'.
	rest := string(self)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+1:]
	}
	pf := strings.Fields(rest)
	if len(pf) < 13 { // utime and stime are fields 14 and 15, 12 and 13 here
		return s
	}
	ut, err1 := strconv.ParseInt(pf[11], 10, 64)
	st, err2 := strconv.ParseInt(pf[12], 10, 64)
	if err1 != nil || err2 != nil {
		return s
	}
	s.self, s.available = ut+st, true
	return s
}

// parseProcStat reads /proc/stat: the CPU ticks not idle and all of them,
// summed over every CPU (its "cpu" line), and how many CPUs those are (its
// "cpuN" lines).
func parseProcStat(stat string) (busy, total int64, cpus int, ok bool) {
	lines := strings.Split(stat, "\n")
	f := strings.Fields(lines[0])
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, 0, false
	}
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, 0, 0, false
		}
		if i >= 8 { // guest and guest_nice are counted in user and nice already
			break
		}
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	for _, l := range lines[1:] {
		name, _, _ := strings.Cut(l, " ")
		if n, ok := strings.CutPrefix(name, "cpu"); ok && n != "" && strings.Trim(n, "0123456789") == "" {
			cpus++
		}
	}
	return busy, total, cpus, cpus > 0
}

// othersCPU is how many CPUs other processes kept busy, on average,
// between two samples: busy time not spent by this process, as a share of
// all CPU time, times the number of CPUs that time is of. That is every
// CPU of the machine, as /proc/stat counts them, not runtime.NumCPU: a
// process confined to some of them (taskset, a container's cpuset) sees
// fewer, and would report a fraction of what the others used. -1 when
// unknown.
func othersCPU(before, after machineSample) float64 {
	if !before.available || !after.available || after.total <= before.total || after.cpus <= 0 {
		return -1
	}
	others := (after.busy - before.busy) - (after.self - before.self)
	return max(0, float64(others)/float64(after.total-before.total)*float64(after.cpus))
}
