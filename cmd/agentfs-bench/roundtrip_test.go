package main

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/internal/testenv"
)

// TestPingPong measures a few rounds on the CPUs this test may use.
func TestPingPong(t *testing.T) {
	cpus, err := allowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	pairs := [][2]int{{cpus[0], cpus[0]}}
	if len(cpus) > 1 {
		pairs = append(pairs, [2]int{cpus[0], cpus[1]})
	}
	for _, p := range pairs {
		d, err := pingPong(p[0], p[1], 200)
		if err != nil {
			t.Fatalf("CPUs %d and %d: %v", p[0], p[1], err)
		}
		if d <= 0 {
			t.Errorf("CPUs %d and %d: a round took %v", p[0], p[1], d)
		}
	}
}

// TestPingPongRefused checks that a CPU the thread may not move to is
// an error, not a hang.
func TestPingPongRefused(t *testing.T) {
	if _, err := pingPong(0, 1<<12, 10); err == nil || !strings.Contains(err.Error(), "sched_setaffinity to CPU 4096") {
		t.Fatalf("pingPong to CPU 4096: %v, want a sched_setaffinity error", err)
	}
}

func TestRoundTripsMarkdown(t *testing.T) {
	for _, c := range []struct {
		rt   roundTrips
		want string
	}{
		{roundTrips{SameCPU: 3.42, CrossCPU: 26.05}, ": 3.4 µs on one CPU, 26.1 µs across two (medians of 5).\n"},
		{roundTrips{SameCPU: 3.42}, ": 3.4 µs on one CPU (median of 5; one CPU allowed).\n"},
		{roundTrips{SameCPU: 3.42, Error: "boom"}, ": 3.4 µs on one CPU (median of 5); across two not measured (boom).\n"},
		{roundTrips{Error: "boom"}, ": not measured (boom).\n"},
	} {
		if got := c.rt.markdown(); !strings.HasPrefix(got, "A pipe round trip between two threads") || !strings.HasSuffix(got, c.want) {
			t.Errorf("%+v: %q, want it to end in %q", c.rt, got, c.want)
		}
	}
}

// TestRoundTripsReported checks the line in results.md and the names in
// results.json.
func TestRoundTripsReported(t *testing.T) {
	r := sampleReport()
	r.Machine.RoundTrips = &roundTrips{SameCPU: 3.1, CrossCPU: 26}
	if md := r.markdown(); !strings.Contains(md, "Test CPU (2 cores)") || !strings.Contains(md, "3.1 µs on one CPU, 26.0 µs across two") {
		t.Errorf("markdown lacks the round trips:\n%s", md)
	}
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Machine struct {
			RoundTrips map[string]float64 `json:"pipe_round_trips"`
		} `json:"machine"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if rt := doc.Machine.RoundTrips; rt["same_cpu_us"] != 3.1 || rt["cross_cpu_us"] != 26 {
		t.Errorf("pipe_round_trips = %v", rt)
	}
}

// TestPingPongLeavesThreadsFree checks that no thread of the process is
// left pinned after a measurement: the runtime never ends the main
// thread, and a side may run on it.
func TestPingPongLeavesThreadsFree(t *testing.T) {
	cpus, err := allowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	if len(cpus) < 2 {
		testenv.Skip(t, testenv.TwoCPUs, "one CPU allowed: a pinned thread could not be told from a free one")
	}
	var want unix.CPUSet
	if err := unix.SchedGetaffinity(0, &want); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		if _, err := pingPong(cpus[0], cpus[1], 50); err != nil {
			t.Fatal(err)
		}
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil {
			continue
		}
		var got unix.CPUSet
		if err := unix.SchedGetaffinity(tid, &got); err != nil {
			continue // the thread ended
		}
		if got != want {
			t.Errorf("thread %d may run on %d CPUs after the measurement, %d before", tid, got.Count(), want.Count())
		}
	}
}
