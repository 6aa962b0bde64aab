package benchsuite

import (
	"os"
	"runtime"
	"strconv"
	"strings"
)

// machineSample is what /proc says of the machine at one moment: the load
// average, the CPU time every process has used, and this process's.
type machineSample struct {
	load1     string // 1-minute load average; "" where unknown
	busy      int64  // CPU ticks not idle, all processes
	total     int64  // CPU ticks, all
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
	line, _, _ := strings.Cut(string(stat), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return s
	}
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return s
		}
		if i >= 8 { // guest and guest_nice are counted in user and nice already
			break
		}
		s.total += n
		if i != 3 && i != 4 { // idle, iowait
			s.busy += n
		}
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

// othersCPU is how many CPUs other processes kept busy, on average,
// between two samples: busy time not spent by this process, as a share of
// all CPU time, times the number of CPUs. -1 when unknown.
func othersCPU(before, after machineSample) float64 {
	if !before.available || !after.available || after.total <= before.total {
		return -1
	}
	others := (after.busy - before.busy) - (after.self - before.self)
	return max(0, float64(others)/float64(after.total-before.total)*float64(runtime.NumCPU()))
}
