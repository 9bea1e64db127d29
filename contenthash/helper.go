package contenthash

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentfs/agentfs/procfs"
)

// # The hashing process
//
// A thread's nice value orders it only against the threads of its own
// autogroup (the kernel's scheduler groups the processes of each
// session, CONFIG_SCHED_AUTOGROUP, on by default): against the
// programs of another session the daemon's group competes as a whole,
// however low its hashing thread's priority. So the worker of a
// daemon reads and hashes in a process of its own: started in a new
// session (its own autogroup), which it gives the lowest priority
// (autogroup nice 19, SCHED_IDLE, the idle I/O class), and handed each
// file as a descriptor over a socket pair (SCM_RIGHTS): it needs no
// path, no store and no privilege, and it only reads; so it holds none
// (dropPrivileges: started by root, it runs as nobody). When it cannot be
// started or dies, the worker hashes in its own thread and logs why. A
// computation a command waits for (snapshot show, verify) hashes in the
// daemon, at the command's pace.
//
// The protocol: the worker sends one byte with the descriptor; the
// process answers 41 bytes: 0, the size read (uint64), the SHA-256;
// or 1 and an error message.

// HelperCommand is the hidden command of the agentfs binary that runs
// the hashing process (RunHelper).
const HelperCommand = "__hash-helper"

// helperFd is the descriptor of the socket in the hashing process.
const helperFd = 3

// RunHelper is the hashing process: it serves the socket at fd 3 until
// the worker closes it, and returns the exit code.
func RunHelper() int {
	procfs.LowerOwnPriority()
	dropPrivileges()
	conn := helperFd
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	data := make([]byte, 256<<10)
	for {
		n, oobn, _, _, err := unix.Recvmsg(conn, buf, oob, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return 0 // the worker closed its end
		}
		reply := []byte{1}
		fd, err := receivedFd(oob[:oobn])
		if err == nil {
			f := os.NewFile(uintptr(fd), "hashed")
			sum, size, herr := hashFileBuf(f, data)
			f.Close()
			err = herr
			if err == nil {
				reply = binary.BigEndian.AppendUint64([]byte{0}, uint64(size))
				reply = append(reply, sum[:]...)
			}
		}
		if err != nil {
			reply = append(reply, err.Error()...)
		}
		if _, err := unix.Write(conn, reply); err != nil {
			return 1
		}
	}
}

// receivedFd is the one descriptor of a control message.
func receivedFd(oob []byte) (int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil || len(msgs) != 1 {
		return -1, fmt.Errorf("no descriptor received (%v)", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return -1, fmt.Errorf("not one descriptor received (%v)", err)
	}
	return fds[0], nil
}

// nobody is the user and group the hashing process runs as when
// started by root.
const nobody = 65534

// dropPrivileges gives up what the hashing process does not need: it
// reads only the descriptors it is handed, which need no privilege to
// read. Started by root, it becomes nobody (no groups, no
// capabilities); in every case it may gain none (no_new_privs). Each
// step is best effort: in a user namespace where nobody is not mapped
// it stays the namespace's root, the user outside.
func dropPrivileges() {
	_ = unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
	if os.Geteuid() != 0 {
		return
	}
	ppid := os.Getppid()
	// The syscall package's calls change every thread's credentials.
	if err := syscall.Setgroups(nil); err != nil {
		return
	}
	if err := syscall.Setresgid(nobody, nobody, nobody); err != nil {
		return
	}
	if err := syscall.Setresuid(nobody, nobody, nobody); err != nil {
		return
	}
	// A change of credentials clears the parent-death signal: set it
	// again, and end if the daemon died meanwhile.
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0)
	if os.Getppid() != ppid {
		os.Exit(0)
	}
}

// helper is the worker's side of the hashing process.
type helper struct {
	mu   sync.Mutex // one file at a time
	conn int
	cmd  *exec.Cmd
	dead error // why it no longer serves
	// waitErr is what close's wait returned.
	waitErr error
}

// pid is the hashing process's.
func (p *helper) pid() int { return p.cmd.Process.Pid }

// startHelper starts the hashing process argv (the agentfs binary and
// HelperCommand).
func startHelper(argv []string) (*helper, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("the hashing process: socketpair: %w", err)
	}
	child := os.NewFile(uintptr(fds[1]), "hash-helper")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.ExtraFiles = []*os.File{child} // fd 3
	cmd.Stdin, cmd.Stdout = nil, nil
	cmd.Stderr = os.Stderr
	// Pdeathsig: the process ends with the daemon's thread that
	// started it, or with the daemon.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if os.Geteuid() == 0 {
		// Started by root, it becomes nobody before it runs: a change
		// of credentials clears the parent-death signal, which Go's
		// start of the child sets after the change (and kills the
		// child if the daemon is gone already). Dropped by the
		// process itself (dropPrivileges) there was a moment without
		// it, long for a process at SCHED_IDLE on a busy machine: a
		// daemon killed then, with the process stopped by a pause,
		// left it stopped for ever.
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}
	}
	err = cmd.Start()
	if err != nil && cmd.SysProcAttr.Credential != nil {
		// A user namespace where nobody is not mapped: as before, the
		// process drops what it can itself.
		cmd = exec.Command(argv[0], argv[1:]...)
		cmd.ExtraFiles = []*os.File{child}
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		err = cmd.Start()
	}
	child.Close()
	if err != nil {
		unix.Close(fds[0])
		return nil, fmt.Errorf("the hashing process: %w", err)
	}
	return &helper{conn: fds[0], cmd: cmd}, nil
}

// hash hashes f in the hashing process.
func (p *helper) hash(f *os.File) (Digest, int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead != nil {
		return Digest{}, 0, p.dead
	}
	if err := unix.Sendmsg(p.conn, []byte{0}, unix.UnixRights(int(f.Fd())), nil, 0); err != nil {
		p.dead = fmt.Errorf("the hashing process: sending a file: %w", err)
		return Digest{}, 0, p.dead
	}
	reply := make([]byte, 4096)
	n, err := unix.Read(p.conn, reply)
	for err == unix.EINTR {
		n, err = unix.Read(p.conn, reply)
	}
	switch {
	case err != nil || n == 0:
		p.dead = fmt.Errorf("the hashing process: no answer (%v)", err)
		return Digest{}, 0, p.dead
	case reply[0] != 0:
		return Digest{}, 0, errors.New(string(reply[1:n]))
	case n != 41:
		p.dead = fmt.Errorf("the hashing process: an answer of %d bytes", n)
		return Digest{}, 0, p.dead
	}
	var d Digest
	copy(d[:], reply[9:41])
	return d, int64(binary.BigEndian.Uint64(reply[1:9])), nil
}

// gone reports whether the process no longer serves.
func (p *helper) gone() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dead != nil
}

// close ends the hashing process and waits for it (once: later calls
// return what the first did).
func (p *helper) close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn < 0 {
		return p.waitErr
	}
	unix.Close(p.conn)
	p.conn = -1
	p.signal(unix.SIGCONT) // paused (Hasher.Pause): let it see the close
	if p.dead == nil {
		p.dead = io.ErrClosedPipe
	}
	p.waitErr = p.cmd.Wait()
	return p.waitErr
}

// signal sends sig to the hashing process (it takes no lock, as kill).
func (p *helper) signal(sig os.Signal) { _ = p.cmd.Process.Signal(sig) }

// kill ends the hashing process without waiting for the file it may be
// hashing (a file on a hung network file system, a process stopped):
// the worker's read of its answer then returns, and close reaps it.
// It takes no lock: hash holds p.mu while it waits.
func (p *helper) kill() {
	_ = p.cmd.Process.Kill()
}
