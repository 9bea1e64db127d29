package main

import (
	"math"
	"slices"
)

// median of xs (the mean of the middle two for an even count); NaN for
// none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	mid := len(s) / 2
	if len(s)%2 == 1 {
		return s[mid]
	}
	return (s[mid-1] + s[mid]) / 2
}

// ratio is t over native's time; ok is false when either is missing or
// native's is zero.
func ratio(t, native float64) (float64, bool) {
	if math.IsNaN(t) || math.IsNaN(native) || native <= 0 || t < 0 {
		return 0, false
	}
	return t / native, true
}

// rotate returns list started at its i-th element (mod its length): the
// order of the filesystems in run i, so that none always goes first.
func rotate(list []string, i int) []string {
	if len(list) == 0 {
		return nil
	}
	k := i % len(list)
	return append(slices.Clone(list[k:]), list[:k]...)
}
