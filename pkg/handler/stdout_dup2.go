//go:build aix || darwin || dragonfly || freebsd || netbsd || openbsd

package handler

import "syscall"

func dup2(from, to int) error { return syscall.Dup2(from, to) }
