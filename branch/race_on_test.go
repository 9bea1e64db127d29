//go:build race

package branch

const raceEnabled = true
