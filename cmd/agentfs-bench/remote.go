package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The remote row: agentfs push and pull of a session of 10,000 files
// (2,000 with --quick) against a real S3 server on this machine, Versity's
// gateway serving a directory of the work directory (make bench-deps
// installs it; --versitygw or AGENTFS_VERSITYGW names it), beside cp -a
// of the same files into the server's directory, measured in the same
// runs: what the S3 protocol, the hashing and agentfs cost over writing
// the same bytes to the same disk.
//
// The session is made once: agentfs run copies the files into an empty
// project. Each run pushes it to a fresh prefix (nothing is there yet,
// so every object is sent), pushes it again (every object is there:
// what is left is the hashes, the listing and the documents) and pulls
// it into a fresh state directory
// (every object is fetched, the store built); cp -a copies the source
// files into a fresh directory of the server's disk. The figures are
// the medians, as MB/s of the files' bytes.
//
// Each run also times the start of a mount from the pushed snapshot
// (agentfs mount --from, a private store, returning once the mount is
// ready) beside a local mount of a project holding the same files
// (agentfs mount --lower of the source files), in the same run, the two
// in turn in alternating order: what starting from a remote snapshot
// costs over starting from a local tree. With --baseline (and
// agentfs-baseline in --fs) the baseline's agentfs mounts the same
// way in the same runs, the binaries' order turning too.

// remoteOp names the row, for --only.
const remoteOp = "remote"

const (
	fullRemoteFiles  = 10000
	quickRemoteFiles = 2000
	// The files' sizes cycle through 1 to 16 KiB: source files.
	remoteMinSize = 1 << 10
	remoteSizes   = 16
	remoteAccess  = "agentfs-bench"
	remoteSecret  = "agentfs-bench-secret"
	remoteBucket  = "bench"
)

// remoteResult is the remote row.
type remoteResult struct {
	Files       int       `json:"files"`
	Bytes       int64     `json:"bytes"`
	PushSeconds []float64 `json:"push_seconds"`
	// RepushSeconds: the same push again, every object on the remote
	// (what is left is deciding so: the hashes, the listing, the
	// documents).
	RepushSeconds []float64 `json:"repush_seconds,omitempty"`
	PullSeconds   []float64 `json:"pull_seconds"`
	CopySeconds   []float64 `json:"cp_seconds"`
	// MountFromSeconds: agentfs mount --from of the pushed snapshot;
	// MountSeconds: agentfs mount of the same files, local.
	MountFromSeconds []float64 `json:"mount_from_seconds"`
	MountSeconds     []float64 `json:"mount_seconds"`
	// The same two with --baseline's agentfs, in the same runs.
	BaselineMountFromSeconds []float64 `json:"baseline_mount_from_seconds,omitempty"`
	BaselineMountSeconds     []float64 `json:"baseline_mount_seconds,omitempty"`
	Skipped                  string    `json:"skipped,omitempty"`
}

// mbps is bytes per second in MB/s (10^6) for the median of secs.
func (r *remoteResult) mbps(secs []float64) float64 {
	m := median(secs)
	if m <= 0 {
		return 0
	}
	return float64(r.Bytes) / m / 1e6
}

// runRemote measures the remote row.
func (b *bench) runRemote(ctx context.Context, agentfsOK bool) (res *remoteResult, err error) {
	res = &remoteResult{Files: b.cfg.remoteFiles}
	switch {
	case !agentfsOK:
		res.Skipped = "agentfs did not run (see --fs and the notes)"
	case b.cfg.versitygw == "":
		res.Skipped = "the S3 server is not installed (make bench-deps installs it; or --versitygw PATH)"
	case os.Geteuid() != 0:
		res.Skipped = "agentfs run needs root here to make the session"
	}
	if res.Skipped != "" {
		b.logf("%s: skipped: %s", remoteOp, res.Skipped)
		return res, nil
	}
	b.logf("%s: push and pull of a session of %s files", remoteOp, thousands(res.Files))
	dir := filepath.Join(b.runsDir(), "remote")
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	defer func() {
		if rerr := os.RemoveAll(dir); err == nil && rerr != nil {
			res, err = nil, rerr
		}
	}()
	src := filepath.Join(dir, "src")
	if res.Bytes, err = writeRemoteFiles(src, res.Files); err != nil {
		return nil, err
	}
	gwRoot := filepath.Join(dir, "gw")
	if err := os.MkdirAll(filepath.Join(gwRoot, remoteBucket), 0o755); err != nil {
		return nil, err
	}
	endpoint, stop, err := b.startGateway(ctx, gwRoot, filepath.Join(dir, "gw.log"))
	if err != nil {
		return nil, err
	}
	defer stop()
	project := filepath.Join(dir, "project")
	if err := os.MkdirAll(project, 0o755); err != nil {
		return nil, err
	}
	env := withEnv(b.env, "XDG_STATE_HOME="+filepath.Join(dir, "state-a"), "XDG_CONFIG_HOME="+filepath.Join(dir, "config"),
		"AWS_ACCESS_KEY_ID="+remoteAccess, "AWS_SECRET_ACCESS_KEY="+remoteSecret, "AWS_PROFILE=", "AWS_SESSION_TOKEN=",
		"AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_CONFIG_FILE=/dev/null", "AWS_ENDPOINT_URL=", "AWS_ENDPOINT_URL_S3=")
	out, err := b.agentfsCmd(ctx, project, env, "run", "--", "cp", "-a", src+"/.", ".")
	if err != nil {
		return nil, err
	}
	_, rest, ok := strings.Cut(out, "agentfs run: session ")
	if !ok {
		return nil, fmt.Errorf("%s: agentfs run printed no session: %s", remoteOp, out)
	}
	session, _, _ := strings.Cut(rest, " ")
	for i := range b.cfg.warmup + b.cfg.runs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		name := fmt.Sprintf("r%d", i)
		if _, err := b.agentfsCmd(ctx, "", env, "remote", "add", name, "s3://"+remoteBucket+"/"+name, "--endpoint", endpoint); err != nil {
			return nil, err
		}
		if err := b.beforeTimed(src); err != nil {
			return nil, err
		}
		start := time.Now()
		if _, err := b.agentfsCmd(ctx, "", env, "push", "-s", session, "--remote", name); err != nil {
			return nil, err
		}
		push := time.Since(start).Seconds()
		if err := b.beforeTimed(src); err != nil {
			return nil, err
		}
		start = time.Now()
		if _, err := b.agentfsCmd(ctx, "", env, "push", "-s", session, "--remote", name); err != nil {
			return nil, err
		}
		repush := time.Since(start).Seconds()
		pullEnv := withEnv(env, "XDG_STATE_HOME="+filepath.Join(dir, "state-"+name))
		if err := b.beforeTimed(src); err != nil {
			return nil, err
		}
		start = time.Now()
		if _, err := b.agentfsCmd(ctx, "", pullEnv, "pull", "--project", project, name+"/"+session); err != nil {
			return nil, err
		}
		pull := time.Since(start).Seconds()
		if err := b.beforeTimed(src); err != nil {
			return nil, err
		}
		start = time.Now()
		cp := commandContext(ctx, "", b.env, "cp", "-a", src, filepath.Join(gwRoot, "cp-"+name))
		if o, err := cp.CombinedOutput(); err != nil {
			return nil, commandError(cp.Args, err, string(o))
		}
		copied := time.Since(start).Seconds()
		mounts, err := b.timeMountFrom(ctx, dir, src, name, pullEnv, i)
		if err != nil {
			return nil, err
		}
		from, local := mounts[0].from, mounts[0].local
		if i < b.cfg.warmup {
			continue
		}
		res.PushSeconds, res.PullSeconds, res.CopySeconds = append(res.PushSeconds, push), append(res.PullSeconds, pull), append(res.CopySeconds, copied)
		res.RepushSeconds = append(res.RepushSeconds, repush)
		res.MountFromSeconds, res.MountSeconds = append(res.MountFromSeconds, from), append(res.MountSeconds, local)
		if len(mounts) > 1 {
			res.BaselineMountFromSeconds = append(res.BaselineMountFromSeconds, mounts[1].from)
			res.BaselineMountSeconds = append(res.BaselineMountSeconds, mounts[1].local)
		}
		b.logf("  run %d: push %.2fs, push again %.2fs, pull %.2fs, cp -a %.2fs, mount --from %.3fs, mount %.3fs", i-b.cfg.warmup+1, push, repush, pull, copied, from, local)
		if len(mounts) > 1 {
			b.logf("    baseline: mount --from %.3fs, mount %.3fs", mounts[1].from, mounts[1].local)
		}
	}
	return res, nil
}

// mountTimes are one binary's times of timeMountFrom.
type mountTimes struct{ from, local float64 }

// timeMountFrom times agentfs mount --from of the newest snapshot the
// remote name holds and agentfs mount of the project src, each until
// the mount is ready, with --agentfs's binary and, with --baseline,
// the baseline's too (the second of the times it returns); each is
// unmounted untimed. The order turns with run: each kind of mount and
// each binary comes first in turn.
func (b *bench) timeMountFrom(ctx context.Context, dir, src, name string, env []string, run int) ([]mountTimes, error) {
	out, err := b.agentfsCmd(ctx, "", env, "remote", "ls", name, "--json")
	if err != nil {
		return nil, err
	}
	var listing struct {
		Snapshots []struct {
			ID      string    `json:"id"`
			Created time.Time `json:"created"`
		} `json:"snapshots"`
	}
	if err := json.Unmarshal([]byte(out), &listing); err != nil || len(listing.Snapshots) == 0 {
		return nil, fmt.Errorf("%s: agentfs remote ls %s --json: %v: %s", remoteOp, name, err, out)
	}
	snap := listing.Snapshots[0]
	for _, s := range listing.Snapshots {
		if s.Created.After(snap.Created) {
			snap = s
		}
	}
	empty := filepath.Join(dir, "empty-"+name)
	mnt := filepath.Join(dir, "mnt")
	for _, d := range []string{empty, mnt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	bins := []string{b.cfg.agentfsBin}
	if b.cfg.baselineBin != "" {
		bins = append(bins, b.cfg.baselineBin)
	}
	times := make([]mountTimes, len(bins))
	type mount struct {
		bin  int
		from bool
	}
	var order []mount
	for k := range 2 * len(bins) {
		// run 0: from, local (each binary in turn); run 1: local, from;
		// and the binaries' order turns every second run.
		m := mount{bin: k % len(bins), from: (k/len(bins))%2 == run%2}
		if (run/2)%2 == 1 {
			m.bin = len(bins) - 1 - m.bin
		}
		order = append(order, m)
	}
	for _, m := range order {
		args := []string{"mount", "--lower", src}
		if m.from {
			args = []string{"mount", "--lower", empty, "--from", name + "/" + snap.ID}
		}
		if err := b.beforeTimed(src); err != nil {
			return nil, err
		}
		start := time.Now()
		if _, err := b.agentfsCmdWith(ctx, bins[m.bin], env, append(args, mnt)...); err != nil {
			return nil, err
		}
		secs := time.Since(start).Seconds()
		if _, err := b.agentfsCmdWith(ctx, bins[m.bin], env, "unmount", mnt); err != nil {
			return nil, err
		}
		if m.from {
			times[m.bin].from = secs
		} else {
			times[m.bin].local = secs
		}
	}
	return times, nil
}

// writeRemoteFiles writes n files (1 to 16 KiB, 1,000 to a directory)
// of bytes that do not repeat from file to file, and returns their size.
func writeRemoteFiles(dir string, n int) (int64, error) {
	var total int64
	buf := make([]byte, remoteMinSize*remoteSizes)
	for i := range n {
		d := filepath.Join(dir, fmt.Sprintf("d%03d", i/1000))
		if i%1000 == 0 {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return 0, err
			}
		}
		size := remoteMinSize * (1 + i%remoteSizes)
		for j := range size {
			buf[j] = byte(i*31 + j*7 + j/251)
		}
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%05d.txt", i)), buf[:size], 0o644); err != nil {
			return 0, err
		}
		total += int64(size)
	}
	return total, nil
}

// agentfsCmd runs the agentfs binary under test and returns its output
// (stdout and stderr).
func (b *bench) agentfsCmd(ctx context.Context, dir string, env []string, args ...string) (string, error) {
	return b.runAgentfs(ctx, b.cfg.agentfsBin, dir, env, args...)
}

// agentfsCmdWith is agentfsCmd with the agentfs binary bin.
func (b *bench) agentfsCmdWith(ctx context.Context, bin string, env []string, args ...string) (string, error) {
	return b.runAgentfs(ctx, bin, "", env, args...)
}

func (b *bench) runAgentfs(ctx context.Context, bin, dir string, env []string, args ...string) (string, error) {
	cmd := commandContext(ctx, dir, env, bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", commandError(append([]string{"agentfs"}, args...), err, out.String())
	}
	return out.String(), nil
}

// startGateway starts versitygw serving root on a free port of
// 127.0.0.1 and returns its endpoint, and the function that stops it.
func (b *bench) startGateway(ctx context.Context, root, log string) (string, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		return "", nil, err
	}
	logf, err := os.Create(log)
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(b.cfg.versitygw, "--access", remoteAccess, "--secret", remoteSecret, "--port", addr, "--quiet", "posix", root)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return "", nil, fmt.Errorf("starting %s: %w", b.cfg.versitygw, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = logf.Close(); close(exited) }()
	stop := func() {
		_ = cmd.Process.Kill()
		<-exited
	}
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return "http://" + addr, stop, nil
		}
		select {
		case <-exited:
			out, _ := os.ReadFile(log)
			return "", nil, fmt.Errorf("versitygw exited: %s", out)
		case <-ctx.Done():
			stop()
			return "", nil, ctx.Err()
		default:
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, errors.New("versitygw did not listen within a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// markdown writes the remote row's table.
func (r *remoteResult) markdown(b *strings.Builder) {
	fmt.Fprintf(b, "Remote: a session of %s files (%s) pushed to and pulled from a local S3 server (Versity's gateway serving the work directory's disk), beside cp -a of the same files to that disk; medians.\n\n",
		thousands(r.Files), mebibytes(r.Bytes))
	if r.Skipped != "" {
		fmt.Fprintf(b, "Skipped: %s.\n", r.Skipped)
		return
	}
	b.WriteString("| operation | seconds | MB/s | files/s | time vs cp -a |\n|---|---:|---:|---:|---:|\n")
	cp := median(r.CopySeconds)
	for _, row := range []struct {
		name string
		secs []float64
	}{{"agentfs push", r.PushSeconds}, {"agentfs push again (all there)", r.RepushSeconds}, {"agentfs pull", r.PullSeconds}, {"cp -a", r.CopySeconds}} {
		if len(row.secs) == 0 {
			continue
		}
		m := median(row.secs)
		vs := "-"
		if x, ok := ratio(m, cp); ok {
			vs = fmt.Sprintf("%.1f×", x)
		}
		fmt.Fprintf(b, "| %s | %.2f | %.1f | %.0f | %s |\n", row.name, m, r.mbps(row.secs), float64(r.Files)/m, vs)
	}
	if len(r.MountSeconds) == 0 {
		return
	}
	fmt.Fprintf(b, "\nStarting a mount (until it is ready) from the pushed snapshot of those %s files, beside a local mount of the same files; medians.\n\n", thousands(r.Files))
	b.WriteString("| mount | seconds | time vs local mount |\n|---|---:|---:|\n")
	for _, row := range []struct {
		name        string
		secs, local []float64
	}{{"agentfs mount --from REMOTE/SNAPSHOT", r.MountFromSeconds, r.MountSeconds}, {"agentfs mount (local)", r.MountSeconds, r.MountSeconds},
		{"agentfs-baseline mount --from REMOTE/SNAPSHOT", r.BaselineMountFromSeconds, r.BaselineMountSeconds},
		{"agentfs-baseline mount (local)", r.BaselineMountSeconds, r.BaselineMountSeconds}} {
		if len(row.secs) == 0 {
			continue
		}
		m, local := median(row.secs), median(row.local)
		vs := "-"
		if x, ok := ratio(m, local); ok {
			vs = fmt.Sprintf("%.1f×", x)
		}
		fmt.Fprintf(b, "| %s | %.3f | %s |\n", row.name, m, vs)
	}
}
