package autosnap

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// epoch is the fake "now" of retention and scheduler tests.
var epoch = time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)

func ids(snaps []Snap) []string {
	var out []string
	for _, s := range snaps {
		out = append(out, s.ID)
	}
	return out
}

func TestPruneKeepsEverythingRecent(t *testing.T) {
	var snaps []Snap
	for i := range 30 {
		snaps = append(snaps, Snap{ID: fmt.Sprint("a", i), Kind: KindAuto, Created: epoch.Add(-time.Duration(i) * time.Minute)})
	}
	if drop := (Policy{}).Prune(epoch, snaps); len(drop) != 0 {
		t.Errorf("Prune deleted %v, want nothing (all younger than an hour)", ids(drop))
	}
}

func TestPruneThinsWithAge(t *testing.T) {
	// One automatic snapshot every 10 minutes for three days.
	var snaps []Snap
	for i := range 3 * 24 * 6 {
		snaps = append(snaps, Snap{ID: fmt.Sprintf("s%03d", i), Kind: KindAuto, Created: epoch.Add(-time.Duration(i) * 10 * time.Minute)})
	}
	drop := (Policy{Keep: 1000}).Prune(epoch, snaps)
	dropped := map[string]bool{}
	for _, s := range drop {
		dropped[s.ID] = true
	}
	var keptDense, keptHourly, keptDaily int
	hours, days := map[int64]int{}, map[int64]int{}
	for _, s := range snaps {
		if dropped[s.ID] {
			continue
		}
		age := epoch.Sub(s.Created)
		switch {
		case age < time.Hour:
			keptDense++
		case age < 24*time.Hour:
			keptHourly++
			hours[s.Created.Unix()/3600]++
		default:
			keptDaily++
			days[s.Created.Unix()/86400]++
		}
	}
	if keptDense != 6 {
		t.Errorf("kept %d of the last hour's 6 snapshots, want all", keptDense)
	}
	for h, n := range hours {
		if n != 1 {
			t.Errorf("hour %d keeps %d snapshots, want 1", h, n)
		}
	}
	for d, n := range days {
		if n != 1 {
			t.Errorf("day %d keeps %d snapshots, want 1", d, n)
		}
	}
	if keptHourly < 22 || keptHourly > 24 {
		t.Errorf("kept %d snapshots between an hour and a day old, want one per hour (22 to 24)", keptHourly)
	}
	if keptDaily < 2 || keptDaily > 3 {
		t.Errorf("kept %d snapshots older than a day, want one per day (2 or 3)", keptDaily)
	}
	// Deletions come oldest first.
	if !slices.IsSortedFunc(drop, func(a, b Snap) int { return a.Created.Compare(b.Created) }) {
		t.Errorf("deletions are not oldest first: %v", ids(drop))
	}
}

func TestPruneIsStableOverTime(t *testing.T) {
	// What thinning keeps at one time, it keeps an hour later (except
	// what moves into a coarser step).
	var snaps []Snap
	for i := range 48 * 4 {
		snaps = append(snaps, Snap{ID: fmt.Sprintf("s%03d", i), Kind: KindAuto, Created: epoch.Add(-time.Duration(i) * 15 * time.Minute)})
	}
	p := Policy{Keep: 1000}
	first := p.Prune(epoch, snaps)
	left := without(snaps, first)
	again := p.Prune(epoch, left)
	if len(again) != 0 {
		t.Errorf("pruning twice at the same time deletes %v the second time", ids(again))
	}
	later := p.Prune(epoch.Add(10*time.Minute), left)
	for _, s := range later {
		if epoch.Add(10*time.Minute).Sub(s.Created) < time.Hour {
			t.Errorf("later prune deleted %s, younger than an hour", s.ID)
		}
	}
}

func without(snaps, drop []Snap) []Snap {
	var out []Snap
	for _, s := range snaps {
		if !slices.ContainsFunc(drop, func(d Snap) bool { return d.ID == s.ID }) {
			out = append(out, s)
		}
	}
	return out
}

func TestPruneCountLimitAndKinds(t *testing.T) {
	var snaps []Snap
	for i := range 10 {
		snaps = append(snaps, Snap{ID: fmt.Sprint("auto", i), Kind: KindAuto, Created: epoch.Add(-time.Duration(i) * time.Minute)})
	}
	old := epoch.Add(-400 * 24 * time.Hour)
	keepers := []Snap{
		{ID: "manual", Kind: "manual", Created: old},
		{ID: "prerun", Kind: "pre-run", Created: old},
		{ID: "safety", Kind: "safety", Created: old},
		{ID: "tagged", Kind: KindAuto, Created: old, Pinned: true},
	}
	snaps = append(snaps, keepers...)
	drop := (Policy{Keep: 4}).Prune(epoch, snaps)
	want := []string{"auto9", "auto8", "auto7", "auto6", "auto5", "auto4"}
	if !slices.Equal(ids(drop), want) {
		t.Errorf("Prune(keep 4) = %v, want %v (the oldest automatic ones)", ids(drop), want)
	}
	drop = KeepNewest(2, snaps)
	want = []string{"auto9", "auto8", "auto7", "auto6", "auto5", "auto4", "auto3", "auto2"}
	if !slices.Equal(ids(drop), want) {
		t.Errorf("KeepNewest(2) = %v, want %v", ids(drop), want)
	}
	if drop := KeepNewest(0, keepers); len(drop) != 0 {
		t.Errorf("KeepNewest(0) deleted %v: manual, pre-run, safety and pinned snapshots are never deleted", ids(drop))
	}
	if drop := KeepNewest(100, snaps); len(drop) != 0 {
		t.Errorf("KeepNewest(100) of 10 deleted %v", ids(drop))
	}
}
