package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/google/uuid"
)

// The node id names this process as the owner of the servers it serves (a lease's owner). A daemon that restarts
// after a crash should be the same owner again, so that it takes its servers back at once instead of waiting for
// its old leases to lapse; two processes running at the same time must never share an id, or both would believe
// they own every server. So the id lives in the data directory, in numbered slots, each claimed with an exclusive
// flock(2) for the life of the process (the kernel drops it when the process dies, however it dies): a restarted
// `serve` finds slot 0 free and reuses its id; an `aggregator stdio` started beside it finds slot 0 held and takes
// slot 1.

// nodeSlots bounds the processes that may share one data directory.
const nodeSlots = 16

// nodeIdentity claims the first free slot under dataDir/node and returns its id (created on first use) and the
// file whose lock holds the claim (close it to give the slot up). dataDir empty: a fresh id, not kept.
func nodeIdentity(dataDir string) (string, *os.File, error) {
	if dataDir == "" {
		return uuid.NewString(), nil, nil
	}
	dir := filepath.Join(dataDir, "node")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, fmt.Errorf("node id: %w", err)
	}
	for slot := 0; slot < nodeSlots; slot++ {
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("%d.id", slot)), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return "", nil, fmt.Errorf("node id: %w", err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				continue // a running process holds this slot
			}
			return "", nil, fmt.Errorf("node id: lock %s: %w", f.Name(), err)
		}
		id, err := slotID(f)
		if err != nil {
			f.Close()
			return "", nil, err
		}
		return id, f, nil
	}
	return "", nil, fmt.Errorf("node id: %d processes already run on data directory %s", nodeSlots, dataDir)
}

// slotID reads the id kept in a claimed slot, or writes a new one.
func slotID(f *os.File) (string, error) {
	b := make([]byte, 128)
	n, err := f.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("node id: read %s: %w", f.Name(), err)
	}
	if id := strings.TrimSpace(string(b[:n])); id != "" {
		if _, err := uuid.Parse(id); err == nil {
			return id, nil
		}
	}
	id := uuid.NewString()
	if err := f.Truncate(0); err != nil {
		return "", fmt.Errorf("node id: %w", err)
	}
	if _, err := f.WriteAt([]byte(id+"\n"), 0); err != nil {
		return "", fmt.Errorf("node id: write %s: %w", f.Name(), err)
	}
	return id, f.Sync()
}
