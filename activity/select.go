package activity

import (
	"context"
	"errors"
	"strings"
	"time"
)

// Selection picks entries of the log as agentfs log shows them: those
// at or after Since, and of those only the Tail last (0: all).
type Selection struct {
	Since time.Time
	Tail  int
}

// ReadSelected calls fn with the entries of the log in the store dir
// that s selects, oldest first.
func ReadSelected(dir string, log Stream, s Selection, fn func(Line) error) error {
	t := s.tailer(fn)
	if err := Read(dir, log, t.add); err != nil {
		return err
	}
	return t.flush()
}

// FollowSelected is ReadSelected, and then calls fn with each entry
// appended later that s selects (by time), until ctx ends; idle is
// called whenever everything written so far was given to fn.
func FollowSelected(ctx context.Context, dir string, log Stream, poll time.Duration, s Selection, fn func(Line) error, idle func() error) error {
	t := s.tailer(fn)
	caughtUp := false
	return Follow(ctx, dir, log, poll, func(l Line) error {
		if caughtUp {
			return t.give(l)
		}
		return t.add(l)
	}, func() error {
		if !caughtUp {
			caughtUp = true
			if err := t.flush(); err != nil {
				return err
			}
		}
		return idle()
	})
}

// tailer keeps the last entries of a selection until they can be
// given.
type tailer struct {
	s    Selection
	fn   func(Line) error
	last []Line
}

func (s Selection) tailer(fn func(Line) error) *tailer { return &tailer{s: s, fn: fn} }

// give passes l on if it is recent enough.
func (t *tailer) give(l Line) error {
	if l.Time.Before(t.s.Since) {
		return nil
	}
	return t.fn(l)
}

// add passes l on, or keeps it among the Tail last.
func (t *tailer) add(l Line) error {
	if t.s.Tail == 0 {
		return t.give(l)
	}
	if l.Time.Before(t.s.Since) {
		return nil
	}
	if len(t.last) == t.s.Tail {
		t.last = t.last[1:]
	}
	t.last = append(t.last, l)
	return nil
}

// flush passes on the entries kept.
func (t *tailer) flush() error {
	for _, l := range t.last {
		if err := t.fn(l); err != nil {
			return err
		}
	}
	t.last = nil
	return nil
}

// ParseSince parses the start of a selection: "" (everything), a
// duration back from now, or a time (RFC 3339, "2006-01-02 15:04:05",
// "2006-01-02 15:04", "2006-01-02", or "15:04"/"15:04:05" today, in
// local time).
func ParseSince(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, errors.New("a duration back from now is positive (10m, 2h)")
		}
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	for _, layout := range []string{"15:04:05", "15:04"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			y, m, d := now.Local().Date()
			return time.Date(y, m, d, t.Hour(), t.Minute(), t.Second(), 0, time.Local), nil
		}
	}
	return time.Time{}, errors.New("write a duration (10m, 2h) or a time (15:04, 2006-01-02 15:04:05, RFC 3339)")
}
