package ctl

import "time"

// Payloads of OpActivity.

// ActivityArgs select entries of the activity log.
type ActivityArgs struct {
	// Since: entries at or after this time (zero: all).
	Since time.Time `json:"since,omitempty"`
	// Op keeps entries of one operation ("write", "unlink", ...).
	Op string `json:"op,omitempty"`
	// PathPrefix keeps entries whose path (or second path) is this
	// path or below it, relative to the mount root.
	PathPrefix string `json:"path_prefix,omitempty"`
	// Limit keeps the newest Limit entries of those selected (0: the
	// daemon's default, 1,000).
	Limit int `json:"limit,omitempty"`
}

// ActivityEntry is one entry of the activity log (see package
// activity).
type ActivityEntry struct {
	Time    time.Time `json:"time"`
	Pid     int       `json:"pid,omitempty"`
	Uid     uint32    `json:"uid"`
	Command string    `json:"command,omitempty"`
	Branch  string    `json:"branch,omitempty"`
	Op      string    `json:"op"`
	Path    string    `json:"path,omitempty"`
	Path2   string    `json:"path2,omitempty"`
	Attrs   string    `json:"attrs,omitempty"`
	Count   int64     `json:"count,omitempty"`
	Detail  string    `json:"detail,omitempty"`
}

// ActivityReply is the reply of OpActivity, oldest first.
type ActivityReply struct {
	Entries []ActivityEntry `json:"entries"`
	// Truncated: more entries matched than Limit; the oldest were left
	// out.
	Truncated bool `json:"truncated,omitempty"`
}
