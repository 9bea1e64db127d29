package ctl

import "time"

// Payloads of OpPush.

// RemoteSpec says where a remote is and how to sign requests to it. The
// CLI resolves the credentials the AWS way in the user's environment
// and sends them: a daemon does not have that environment. Only the
// mount's owner and root may talk to the daemon, so the keys go only
// where the user's own programs could read them.
type RemoteSpec struct {
	Name         string `json:"name"`
	URL          string `json:"url"` // s3://BUCKET/PREFIX
	Endpoint     string `json:"endpoint,omitempty"`
	Region       string `json:"region,omitempty"`
	AccessKey    string `json:"access_key"`
	SecretKey    string `json:"secret_key"`
	SessionToken string `json:"session_token,omitempty"`
}

// PushSession is the record of the session a push sends whole.
type PushSession struct {
	ID       string    `json:"id"`
	Project  string    `json:"project"`
	Command  []string  `json:"command,omitempty"`
	Started  time.Time `json:"started"`
	Ended    time.Time `json:"ended,omitzero"`
	ExitCode *int      `json:"exit_code,omitempty"`
	State    string    `json:"state"`
	PreRun   string    `json:"pre_run,omitempty"`
}

// PushArgs are the arguments of OpPush: the snapshots Refs (ids, id
// prefixes or tags), or with Session every snapshot and branch of the
// store and the session's record.
type PushArgs struct {
	Remote   RemoteSpec   `json:"remote"`
	Refs     []string     `json:"refs,omitempty"`
	Session  *PushSession `json:"session,omitempty"`
	Parallel int          `json:"parallel,omitempty"` // objects at once; 0: the default
}

// PushReply is the reply of OpPush.
type PushReply struct {
	Remote    string   `json:"remote"`
	URL       string   `json:"url"`
	Session   string   `json:"session,omitempty"`
	Snapshots []string `json:"snapshots"`          // the ids pushed
	Branches  []string `json:"branches,omitempty"` // the branches pushed
	// Objects the documents name (each once); Sent of them uploaded
	// (SentBytes), Skipped already in the remote (SkippedBytes).
	Objects      int   `json:"objects"`
	Sent         int   `json:"sent"`
	SentBytes    int64 `json:"sent_bytes"`
	Skipped      int   `json:"skipped"`
	SkippedBytes int64 `json:"skipped_bytes"`
	// Hashed files were read to learn their SHA-256 (HashedBytes): the
	// store's content hashes knew the others (Known).
	Hashed      int   `json:"hashed"`
	HashedBytes int64 `json:"hashed_bytes"`
	Known       int   `json:"known"`
	// PartsSent and PartsKept count the parts of large objects' uploads
	// sent, and found on the server from an interrupted push.
	PartsSent int `json:"parts_sent,omitempty"`
	PartsKept int `json:"parts_kept,omitempty"`
}
