package backend

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Process groups of stdio servers that outlive a daemon that died. Each stdio server runs in its own process group
// and its direct child dies with the daemon (Pdeathsig), but a grandchild (`bash -c "helper & exec server"`) does
// not: a daemon killed with SIGKILL cannot kill the group. So while a child runs, a small record in
// <data dir>/stdio-groups says which group it is, and the next daemon to start on that data directory kills what
// is left (ReapProcessGroups). A PID can be reused, so a record is matched only against processes that prove they
// belong to it:
//
//   - the record's boot id (/proc/sys/kernel/random/boot_id) is this boot's, and the daemon that wrote it is dead
//     (its PID is gone or has another start time: a daemon still running on the same directory keeps its groups);
//   - the group leader counts when it still has the recorded start time (/proc/<pid>/stat field 22, clock ticks
//     since boot) and is its own group's leader; while it lives, every member of its group belongs to the record;
//   - any other process counts when it started no earlier than the leader (or, before the leader's start time was
//     recorded, than the daemon) and its environment (/proc/<pid>/environ) holds the record's random marker
//     MCP_AGGREGATOR_PGROUP=<marker>, which every child gets and its descendants inherit.
//
// Each process is signalled through a pidfd opened before it is checked, so a process that exits after the check
// cannot have its PID reused by the one that receives SIGKILL.

// groupMarkerVar is the environment variable that marks every process of one stdio server's tree.
const groupMarkerVar = "MCP_AGGREGATOR_PGROUP"

// groupsDirName is the directory of the records under the data directory.
const groupsDirName = "stdio-groups"

// groupRecord is one running stdio server's process group, as recorded on disk.
type groupRecord struct {
	BootID      string `json:"boot_id"`
	OwnerPID    int    `json:"owner_pid"`
	OwnerStart  uint64 `json:"owner_start"`
	PGID        int    `json:"pgid,omitempty"`         // 0 until the child has started
	LeaderStart uint64 `json:"leader_start,omitempty"` // the leader's /proc/<pid>/stat start time
	Marker      string `json:"marker"`
}

// ProcGroups writes the records of this daemon's stdio servers. A nil *ProcGroups records nothing.
type ProcGroups struct {
	dir    string
	log    *slog.Logger
	bootID string
	pid    int
	start  uint64
}

// NewProcGroups records under dataDir/stdio-groups; nil (and a warning) where /proc cannot identify processes.
func NewProcGroups(dataDir string, log *slog.Logger) *ProcGroups {
	boot, err := bootID()
	if err == nil {
		var st procStat
		if st, err = readProcStat(os.Getpid()); err == nil {
			return &ProcGroups{dir: filepath.Join(dataDir, groupsDirName), log: log, bootID: boot, pid: os.Getpid(), start: st.start}
		}
	}
	log.Warn("stdio process groups are not recorded: a daemon killed with SIGKILL may leave grandchildren of stdio servers behind", "error", err)
	return nil
}

// groupChild is the record of one stdio child process. A nil *groupChild records nothing.
type groupChild struct {
	g      *ProcGroups
	marker string
}

// child prepares the record of a new stdio child: its marker goes into the child's environment.
func (g *ProcGroups) child() *groupChild {
	if g == nil {
		return nil
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
	return &groupChild{g: g, marker: hex.EncodeToString(b)}
}

func (c *groupChild) path() string {
	return filepath.Join(c.g.dir, c.marker+".json")
}

// record writes the record: before the child starts with pgid 0 (its tree is then found by marker alone), and
// again once it runs, with its process group and the leader's start time.
func (c *groupChild) record(pgid int) {
	if c == nil {
		return
	}
	rec := groupRecord{BootID: c.g.bootID, OwnerPID: c.g.pid, OwnerStart: c.g.start, Marker: c.marker}
	if pgid > 0 {
		if st, err := readProcStat(pgid); err == nil {
			rec.PGID, rec.LeaderStart = pgid, st.start
		}
	}
	if err := c.write(rec); err != nil {
		c.g.log.Warn("cannot record a stdio server's process group", "dir", c.g.dir, "error", err)
	}
}

func (c *groupChild) write(rec groupRecord) error {
	b, _ := json.Marshal(rec)
	if err := os.MkdirAll(c.g.dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", c.g.dir, err)
	}
	f, err := os.CreateTemp(c.g.dir, ".record-*")
	if err != nil {
		return fmt.Errorf("create record: %w", err)
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), c.path())
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("write record: %w", err)
	}
	return nil
}

// remove deletes the record once its group has been killed.
func (c *groupChild) remove() {
	if c == nil {
		return
	}
	if err := os.Remove(c.path()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		c.g.log.Warn("cannot remove a stdio server's process-group record", "error", err)
	}
}

// ReapProcessGroups kills the processes that stdio servers of dead daemons left behind on this node, from the
// records under dataDir/stdio-groups (see the top of procgroups.go for how a process is proved to belong to a
// record), and deletes those records. Records of a daemon still running are kept. `aggregator serve` and
// `aggregator stdio` call it before starting their actors. It returns how many processes it killed.
func ReapProcessGroups(ctx context.Context, dataDir string, log *slog.Logger) int {
	if dataDir == "" {
		return 0
	}
	dir := filepath.Join(dataDir, groupsDirName)
	entries, err := os.ReadDir(dir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			log.Warn("cannot read the stdio process-group records", "dir", dir, "error", err)
		}
		return 0
	}
	boot, err := bootID()
	if err != nil {
		log.Warn("cannot reap stdio process groups", "error", err)
		return 0
	}
	killed, groups := 0, 0
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		if strings.HasPrefix(e.Name(), ".record-") {
			if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > time.Minute {
				_ = os.Remove(path) // a record a dead daemon never finished writing
			}
			continue
		}
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		var rec groupRecord
		if err := json.Unmarshal(b, &rec); err != nil || rec.Marker == "" {
			log.Warn("removing an unreadable stdio process-group record", "file", path)
			_ = os.Remove(path)
			continue
		}
		if rec.BootID != boot {
			_ = os.Remove(path) // from before a reboot: none of its processes runs
			continue
		}
		if alive(rec.OwnerPID, rec.OwnerStart) {
			continue // the daemon that runs it is alive: its group is its own business
		}
		n := reapGroup(ctx, rec)
		if n > 0 {
			groups++
			killed += n
		}
		_ = os.Remove(path)
	}
	if killed > 0 {
		log.Info("killed processes that stdio servers of a daemon that died left behind", "processes", killed, "groups", groups)
	}
	return killed
}

// reapGroup kills every process that proves it belongs to rec, in rounds until none is left (a member may fork
// while the others are killed), and returns how many it killed.
func reapGroup(ctx context.Context, rec groupRecord) int {
	seen := map[procID]bool{}
	for round := 0; round < 50 && ctx.Err() == nil; round++ {
		victims := groupMembers(rec)
		if len(victims) == 0 {
			break
		}
		for _, v := range victims {
			if v.signal(syscall.SIGKILL) == nil {
				seen[v.id] = true
			}
			v.close()
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	return len(seen)
}

// procID identifies a process across PID reuse.
type procID struct {
	pid   int
	start uint64
}

// victim is a process proved to belong to a record, with the pidfd it will be signalled through (-1 where the
// kernel has no pidfds).
type victim struct {
	id procID
	fd int
}

func (v victim) signal(sig syscall.Signal) error {
	if v.fd < 0 {
		return syscall.Kill(v.id.pid, sig)
	}
	return unix.PidfdSendSignal(v.fd, sig, nil, 0)
}

func (v victim) close() {
	if v.fd >= 0 {
		_ = unix.Close(v.fd)
	}
}

// openPidfd opens a pidfd of pid: -1 with no error where the kernel has none (then the PID is signalled).
func openPidfd(pid int) (int, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, syscall.ENOSYS) {
		return -1, nil
	}
	return fd, err
}

// groupMembers finds the processes that belong to rec now (see the top of the file).
func groupMembers(rec groupRecord) []victim {
	notBefore := rec.LeaderStart
	if notBefore == 0 {
		notBefore = rec.OwnerStart
	}
	// While the recorded leader lives, its process group is the recorded one, and so are all its members.
	leaderFD, leaderOK := -1, false
	if rec.PGID > 0 && rec.LeaderStart > 0 {
		if fd, err := openPidfd(rec.PGID); err == nil {
			st, err := readProcStat(rec.PGID)
			if err == nil && !st.zombie && st.pgrp == rec.PGID && st.start == rec.LeaderStart {
				leaderFD, leaderOK = fd, true
			} else if fd >= 0 {
				_ = unix.Close(fd)
			}
		}
	}
	self := os.Getpid()
	var out []victim
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		st, err := readProcStat(pid)
		if err != nil || st.zombie || st.start < notBefore {
			continue
		}
		inGroup := leaderOK && st.pgrp == rec.PGID
		if !inGroup && !hasMarker(pid, rec.Marker) {
			continue
		}
		// Open the pidfd, then check again: the checks then speak of the process the pidfd refers to, or the
		// pidfd's process has exited and signalling it does nothing.
		fd, err := openPidfd(pid)
		if err != nil {
			continue
		}
		v := victim{id: procID{pid, st.start}, fd: fd}
		st2, err := readProcStat(pid)
		ok := err == nil && !st2.zombie && st2.start == st.start &&
			((leaderOK && st2.pgrp == rec.PGID) || hasMarker(pid, rec.Marker))
		if !ok {
			v.close()
			continue
		}
		out = append(out, v)
	}
	if leaderOK {
		// Members counted for their group alone are the record's only if the leader still lived after the scan.
		if leaderFD >= 0 && unix.PidfdSendSignal(leaderFD, 0, nil, 0) != nil {
			kept := out[:0]
			for _, v := range out {
				if hasMarker(v.id.pid, rec.Marker) {
					kept = append(kept, v)
				} else {
					v.close()
				}
			}
			out = kept
		}
		if leaderFD >= 0 {
			_ = unix.Close(leaderFD)
		}
	}
	return out
}

// hasMarker reports whether pid's environment holds MCP_AGGREGATOR_PGROUP=marker.
func hasMarker(pid int, marker string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return false
	}
	want := []byte(groupMarkerVar + "=" + marker)
	for kv := range bytes.SplitSeq(b, []byte{0}) {
		if bytes.Equal(kv, want) {
			return true
		}
	}
	return false
}

// alive reports whether the process pid still runs with that start time.
func alive(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	st, err := readProcStat(pid)
	return err == nil && !st.zombie && st.start == start
}

// procStat is what the reaper reads from /proc/<pid>/stat.
type procStat struct {
	pgrp   int    // field 5
	start  uint64 // field 22: clock ticks after boot
	zombie bool   // state Z
}

// readProcStat reads /proc/<pid>/stat. The command name (field 2) is in parentheses and may hold spaces and
// parentheses itself, so the fields are counted from the last ')'.
func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(string(b))
}

func parseProcStat(s string) (procStat, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, errors.New("malformed /proc stat")
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3
	if len(f) < 20 {
		return procStat{}, errors.New("malformed /proc stat")
	}
	pgrp, err1 := strconv.Atoi(f[2])
	start, err2 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil {
		return procStat{}, errors.New("malformed /proc stat")
	}
	return procStat{pgrp: pgrp, start: start, zombie: f[0] == "Z" || f[0] == "X"}, nil
}

// bootID identifies this boot of the machine: start times count from it.
func bootID() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("read boot id: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}
