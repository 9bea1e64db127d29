package integration

import "syscall"

type syscallCred struct{ uid, gid uint32 }

func (c syscallCred) attr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: c.uid, Gid: c.gid, Groups: []uint32{}}}
}
