package autosnap

import (
	"slices"
	"time"
)

// # Retention
//
// Automatic snapshots thin out with age, newest first:
//
//	younger than Dense (an hour)     all kept
//	younger than Hourly (a day)      the newest of each hour
//	older                            the newest of each day
//
// and, of what that keeps, at most Keep (the newest). Hours and days
// are counted in UTC from the Unix epoch, so a snapshot kept once stays
// kept as time goes by (until the count limit or the next coarser step
// takes it). Only automatic snapshots (kinds auto, git, build and
// idle: Automatic) that are not pinned (by a tag, or as the snapshot a
// branch was created from) are ever chosen for deletion: manual,
// pre-run, post-run and safety snapshots, and pinned ones of any kind,
// are never deleted and do not count against Keep.

// Retention defaults.
const (
	DefaultKeep   = 100
	DefaultDense  = time.Hour
	DefaultHourly = 24 * time.Hour
)

// The kinds of automatic snapshots (the values of branch.KindAuto and
// the others): the quiet period's, a git commit's, a successful build's
// and an idle period's. Retention may delete them.
const (
	KindAuto  = "auto"
	KindGit   = "git"
	KindBuild = "build"
	KindIdle  = "idle"
)

// Automatic reports whether a snapshot of kind is an automatic one,
// which retention thins out.
func Automatic(kind string) bool {
	switch kind {
	case KindAuto, KindGit, KindBuild, KindIdle:
		return true
	}
	return false
}

// Snap is what retention needs to know of a snapshot.
type Snap struct {
	ID      string
	Kind    string
	Created time.Time
	// Pinned snapshots are kept: a tag names them, or a branch was
	// created from them.
	Pinned bool
}

func (s Snap) prunable() bool { return Automatic(s.Kind) && !s.Pinned }

// Policy is a retention policy.
type Policy struct {
	Keep   int           // at most this many automatic snapshots (DefaultKeep when 0)
	Dense  time.Duration // DefaultDense when 0
	Hourly time.Duration // DefaultHourly when 0
}

// Prune returns the snapshots the policy deletes at now, oldest first.
func (p Policy) Prune(now time.Time, snaps []Snap) []Snap {
	if p.Keep <= 0 {
		p.Keep = DefaultKeep
	}
	if p.Dense <= 0 {
		p.Dense = DefaultDense
	}
	if p.Hourly <= 0 {
		p.Hourly = DefaultHourly
	}
	auto := newestFirst(snaps)
	var kept, drop []Snap
	seen := map[[2]int64]bool{} // (bucket size, bucket) already holding a kept snapshot
	for _, s := range auto {
		age := now.Sub(s.Created)
		var size int64
		switch {
		case age < p.Dense:
			kept = append(kept, s)
			continue
		case age < p.Hourly:
			size = int64(time.Hour / time.Second)
		default:
			size = int64(24 * time.Hour / time.Second)
		}
		key := [2]int64{size, floorDiv(s.Created.Unix(), size)}
		if seen[key] {
			drop = append(drop, s)
			continue
		}
		seen[key] = true
		kept = append(kept, s)
	}
	if len(kept) > p.Keep {
		drop = append(drop, kept[p.Keep:]...)
	}
	return oldestFirst(drop)
}

// KeepNewest returns the automatic snapshots beyond the n newest,
// oldest first (agentfs snapshot prune --keep N).
func KeepNewest(n int, snaps []Snap) []Snap {
	auto := newestFirst(snaps)
	if n < 0 {
		n = 0
	}
	if len(auto) <= n {
		return nil
	}
	return oldestFirst(auto[n:])
}

// newestFirst returns the prunable snapshots, newest first.
func newestFirst(snaps []Snap) []Snap {
	var auto []Snap
	for _, s := range snaps {
		if s.prunable() {
			auto = append(auto, s)
		}
	}
	slices.SortStableFunc(auto, func(a, b Snap) int { return b.Created.Compare(a.Created) })
	return auto
}

func oldestFirst(snaps []Snap) []Snap {
	slices.SortStableFunc(snaps, func(a, b Snap) int { return a.Created.Compare(b.Created) })
	return snaps
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
