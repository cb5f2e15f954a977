//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package embedded

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// lockDir creates dir if needed and takes an exclusive, non-blocking flock on
// its lock file, then writes this process's id into it. The open file holds
// the lock: the kernel releases it when the file is closed or the process
// exits, even by SIGKILL. Errors: a *LockedError if another process holds
// the lock.
func lockDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded: data directory: %w", err)
	}
	f, err := os.OpenFile(lockPath(dir), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("embedded: lock file: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if errors.Is(err, syscall.EWOULDBLOCK) {
		defer f.Close()
		b := make([]byte, 32)
		n, _ := f.ReadAt(b, 0)
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b[:n])))
		return nil, &LockedError{Dir: dir, PID: pid}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("embedded: lock %s: %w", lockPath(dir), err)
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("embedded: lock file: %w", err)
	}
	return f, nil
}

// LockHolder returns the id of the process that holds dir's lock: a
// running server on dir. Errors: [ErrNotLocked] if no process holds it
// (none has used dir, or the one whose id the file still names has
// exited).
func LockHolder(dir string) (int, error) {
	f, err := os.Open(lockPath(dir))
	if errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("%w: no %s in %s", ErrNotLocked, LockFile, dir)
	}
	if err != nil {
		return 0, fmt.Errorf("embedded: lock file: %w", err)
	}
	defer f.Close()
	// A shared lock taken for a moment: granted only if no server holds
	// the exclusive one.
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err == nil {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return 0, fmt.Errorf("%w: no process holds %s", ErrNotLocked, lockPath(dir))
	}
	if !errors.Is(err, syscall.EWOULDBLOCK) {
		return 0, fmt.Errorf("embedded: lock %s: %w", lockPath(dir), err)
	}
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil || pid < 1 {
		return 0, fmt.Errorf("embedded: %s is locked but names no process id", lockPath(dir))
	}
	return pid, nil
}
