package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// roundTrips is what this machine charges for handing the CPU to
// another thread and getting it back: a pipe round trip between two
// threads, both on one CPU and on two. Every FUSE request a program
// waits for pays such a hand-over twice (to the daemon and back), so
// the figures say how far from native a workload of many small requests
// (grep, small files) can get on the machine of a run; they move more
// from machine to machine, and from day to day on a virtual one, than
// anything agentfs does.
type roundTrips struct {
	// SameCPU and CrossCPU are medians in microseconds; CrossCPU is 0
	// where the benchmark may use only one CPU.
	SameCPU  float64 `json:"same_cpu_us"`
	CrossCPU float64 `json:"cross_cpu_us"`
	Error    string  `json:"error,omitempty"`
}

// markdown is the report's line on the round trips.
func (rt *roundTrips) markdown() string {
	const what = "A pipe round trip between two threads (a FUSE request a program waits for costs two such hand-overs)"
	switch {
	case rt.SameCPU == 0:
		return fmt.Sprintf("%s: not measured (%s).\n", what, rt.Error)
	case rt.Error != "":
		return fmt.Sprintf("%s: %.1f µs on one CPU (median of %d); across two not measured (%s).\n", what, rt.SameCPU, roundTripRuns, rt.Error)
	case rt.CrossCPU == 0:
		return fmt.Sprintf("%s: %.1f µs on one CPU (median of %d; one CPU allowed).\n", what, rt.SameCPU, roundTripRuns)
	}
	return fmt.Sprintf("%s: %.1f µs on one CPU, %.1f µs across two (medians of %d).\n", what, rt.SameCPU, rt.CrossCPU, roundTripRuns)
}

// Rounds per measurement and measurements per figure. A cross-CPU round
// trip takes 5–120 µs on the machines seen so far, one on a single CPU
// 2–8 µs: a few seconds at most.
const (
	sameCPURounds  = 20000
	crossCPURounds = 4000
	roundTripRuns  = 5
)

// measureRoundTrips measures roundTrips on the first two CPUs the
// process may run on.
func measureRoundTrips() roundTrips {
	// Idle Ps, so that the runtime leaves a thread blocked in read(2)
	// its P: with none idle, its monitor takes the P away after 20 µs
	// and wakes another thread to hold it, and the cross-CPU figure
	// came out a third above perf bench sched pipe's (107–116 µs
	// against 73). (Raw system calls, which the runtime does not see,
	// could deadlock a stop-the-world against the thread left waiting.)
	defer restoreGOMAXPROCS(runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + 2))
	var rt roundTrips
	cpus, err := allowedCPUs()
	if err != nil {
		rt.Error = err.Error()
		return rt
	}
	measure := func(a, b, rounds int) (float64, error) {
		var us []float64
		for range roundTripRuns {
			d, err := pingPong(a, b, rounds)
			if err != nil {
				return 0, err
			}
			us = append(us, float64(d)/float64(time.Microsecond))
		}
		return median(us), nil
	}
	if rt.SameCPU, err = measure(cpus[0], cpus[0], sameCPURounds); err == nil && len(cpus) > 1 {
		rt.CrossCPU, err = measure(cpus[0], cpus[1], crossCPURounds)
	}
	if err != nil {
		rt.Error = err.Error()
	}
	return rt
}

// restoreGOMAXPROCS sets GOMAXPROCS back to n, and back to the
// runtime's own choice (which follows the CPUs the process may use)
// where nobody had set it: setting it turns that off.
func restoreGOMAXPROCS(n int) {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.SetDefaultGOMAXPROCS()
		return
	}
	runtime.GOMAXPROCS(n)
}

// allowedCPUs lists the CPUs the calling thread may run on.
func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	var cpus []int
	for c := 0; c < len(set)*64 && len(cpus) < 2; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	if len(cpus) == 0 {
		return nil, errors.New("sched_getaffinity: no CPU allowed")
	}
	return cpus, nil
}

// pingPong bounces a byte between a thread on CPU a and one on CPU b
// through two pipes, rounds times, and returns the time of one round.
// Each side runs on a thread of its own (locked) and gives it back as
// it found it: the main thread, which the runtime never ends, may be
// one of them.
func pingPong(a, b, rounds int) (time.Duration, error) {
	var ping, pong [2]int
	if err := unix.Pipe2(ping[:], unix.O_CLOEXEC); err != nil {
		return 0, fmt.Errorf("pipe2: %w", err)
	}
	if err := unix.Pipe2(pong[:], unix.O_CLOEXEC); err != nil {
		unix.Close(ping[0])
		unix.Close(ping[1])
		return 0, fmt.Errorf("pipe2: %w", err)
	}
	defer unix.Close(ping[0])
	defer unix.Close(pong[0])

	// bounce moves to cpu, says so on ready and, once told to go,
	// reads a byte from in and writes it to out, rounds times (the
	// first side writes first). It closes out when it returns, so that
	// the other side, should this one fail, reads the end of the pipe
	// instead of waiting for ever.
	bounce := func(cpu int, first bool, in, out int, ready chan<- error, start <-chan bool) (err error) {
		defer unix.Close(out)
		runtime.LockOSThread()
		var was, set unix.CPUSet
		if err := unix.SchedGetaffinity(0, &was); err != nil {
			ready <- fmt.Errorf("sched_getaffinity: %w", err)
			return nil // the thread is left locked, and ends with the goroutine
		}
		set.Set(cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			ready <- fmt.Errorf("sched_setaffinity to CPU %d: %w", cpu, err)
			return nil
		}
		defer func() {
			if unix.SchedSetaffinity(0, &was) == nil {
				runtime.UnlockOSThread()
			}
		}()
		ready <- nil
		if !<-start {
			return nil
		}
		buf := []byte{0}
		for i := 0; i < rounds; i++ {
			if first {
				if _, err := unix.Write(out, buf); err != nil {
					return fmt.Errorf("write: %w", err)
				}
			}
			if n, err := unix.Read(in, buf); err != nil || n == 0 {
				return fmt.Errorf("read: %d bytes, %v", n, err)
			}
			if !first {
				if _, err := unix.Write(out, buf); err != nil {
					return fmt.Errorf("write: %w", err)
				}
			}
		}
		return nil
	}

	ready := make(chan error, 2)
	done := make(chan error, 2)
	start := make(chan bool, 2)
	go func() { done <- bounce(a, true, pong[0], ping[1], ready, start) }()
	go func() { done <- bounce(b, false, ping[0], pong[1], ready, start) }()
	err := errors.Join(<-ready, <-ready)
	t0 := time.Now()
	start <- err == nil
	start <- err == nil
	err = errors.Join(err, <-done, <-done)
	if err != nil {
		return 0, fmt.Errorf("pipe round trip: %w", err)
	}
	return time.Since(t0) / time.Duration(rounds), nil
}
