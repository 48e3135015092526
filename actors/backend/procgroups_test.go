package backend

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/mcpgw/aggregator/internal/connconfig"
	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence"
)

func TestParseProcStat(t *testing.T) {
	tests := []struct {
		in   string
		want procStat
		ok   bool
	}{
		{"123 (sleep) S 1 123 123 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 98765 1000 100", procStat{pgrp: 123, start: 98765}, true},
		{"7 (a b) c)) Z 1 9 9 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 42 0 0", procStat{pgrp: 9, start: 42, zombie: true}, true},
		{"7 (x) S 1 9", procStat{}, false},
		{"garbage", procStat{}, false},
	}
	for _, tt := range tests {
		got, err := parseProcStat(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseProcStat(%q) = %+v, %v", tt.in, got, err)
		}
	}
}

// startTree starts `bash -c "helper & exec sleep"` in its own process group with the marker in its environment,
// as Dial does, and returns the leader; the helper's argv[0] is tag (peertest.ProcessesWithArg finds it).
func startTree(t *testing.T, tag, marker string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("bash", "-c", `exec -a "$0" sleep 1000 & exec sleep 1001`, tag)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	if marker != "" {
		cmd.Env = append(cmd.Env, groupMarkerVar+"="+marker)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		for _, p := range peertest.ProcessesWithArg(tag) {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		_ = cmd.Wait()
	})
	// Until the leader has exec'd, its own command line (bash -c ... tag) carries the tag too: wait for the helper,
	// and only the helper, to carry it.
	waitFor(t, func() bool {
		pids := peertest.ProcessesWithArg(tag)
		return len(pids) == 1 && pids[0] != cmd.Process.Pid
	}, "the helper to start")
	return cmd
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// forge writes a record as a daemon would have, under dataDir.
func forge(t *testing.T, dataDir string, rec groupRecord) string {
	t.Helper()
	g := &ProcGroups{dir: filepath.Join(dataDir, groupsDirName), log: slog.Default()}
	c := &groupChild{g: g, marker: rec.Marker}
	if err := c.write(rec); err != nil {
		t.Fatal(err)
	}
	return c.path()
}

func selfStart(t *testing.T) uint64 {
	st, err := readProcStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	return st.start
}

func leaderStart(t *testing.T, pid int) uint64 {
	st, err := readProcStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	return st.start
}

func running(pid int) bool {
	st, err := readProcStat(pid)
	return err == nil && !st.zombie
}

// TestReapProcessGroups: the records of a dead daemon are reaped (leader alive, or gone with its helper left),
// and nothing else is killed: a recorded PID whose start time does not match (a reused PID), a record of a daemon
// still running, a record from another boot.
func TestReapProcessGroups(t *testing.T) {
	boot, err := bootID()
	if err != nil {
		t.Skip("no /proc boot id:", err)
	}
	me, myStart := os.Getpid(), selfStart(t)
	deadOwner := func(rec groupRecord) groupRecord { // this PID, another start time: a daemon that died
		rec.BootID, rec.OwnerPID, rec.OwnerStart = boot, me, myStart+1
		return rec
	}
	ctx := context.Background()

	t.Run("leader alive", func(t *testing.T) {
		dir, tag, marker := t.TempDir(), fmt.Sprintf("reap-a-%d", time.Now().UnixNano()), "m-alive-0123456789abcdef"
		cmd := startTree(t, tag, marker)
		pid := cmd.Process.Pid
		path := forge(t, dir, deadOwner(groupRecord{PGID: pid, LeaderStart: leaderStart(t, pid), Marker: marker}))
		// The owner start time is after the test process's; the leader started later still.
		if n := ReapProcessGroups(ctx, dir, slog.Default()); n != 2 {
			t.Errorf("killed %d processes, want 2", n)
		}
		waitFor(t, func() bool { return len(peertest.ProcessesWithArg(tag)) == 0 && !running(pid) }, "the group to die")
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("record kept: %v", err)
		}
	})

	t.Run("leader gone, helper left", func(t *testing.T) {
		dir, tag, marker := t.TempDir(), fmt.Sprintf("reap-b-%d", time.Now().UnixNano()), "m-gone-0123456789abcdef"
		cmd := startTree(t, tag, marker)
		pid := cmd.Process.Pid
		forge(t, dir, deadOwner(groupRecord{PGID: pid, LeaderStart: leaderStart(t, pid), Marker: marker}))
		_ = cmd.Process.Kill() // as Pdeathsig does when the daemon dies
		_ = cmd.Wait()
		if n := ReapProcessGroups(ctx, dir, slog.Default()); n != 1 {
			t.Errorf("killed %d processes, want 1", n)
		}
		waitFor(t, func() bool { return len(peertest.ProcessesWithArg(tag)) == 0 }, "the helper to die")
	})

	t.Run("recorded before the start", func(t *testing.T) {
		dir, tag, marker := t.TempDir(), fmt.Sprintf("reap-c-%d", time.Now().UnixNano()), "m-pre-0123456789abcdef"
		rec := deadOwner(groupRecord{Marker: marker})
		rec.OwnerStart = myStart // the lower bound of the tree's start times
		rec.OwnerPID = 1<<22 + 1 // beyond pid_max: gone
		startTree(t, tag, marker)
		if n := ReapProcessGroups(ctx, dir, slog.Default()); n != 0 {
			t.Errorf("killed %d with no record yet", n)
		}
		forge(t, dir, rec)
		if n := ReapProcessGroups(ctx, dir, slog.Default()); n != 2 {
			t.Errorf("killed %d processes, want 2", n)
		}
		waitFor(t, func() bool { return len(peertest.ProcessesWithArg(tag)) == 0 }, "the tree to die")
	})

	spared := []struct {
		name string
		rec  func(pid int, start uint64) groupRecord
		kept bool // the record stays (its daemon runs)
	}{
		{"leader start time differs (a reused PID)", func(pid int, start uint64) groupRecord {
			return deadOwner(groupRecord{PGID: pid, LeaderStart: start + 1, Marker: "m-other-0123456789abcdef"})
		}, false},
		{"leader start time differs, record made before", func(pid int, start uint64) groupRecord {
			return deadOwner(groupRecord{PGID: pid, LeaderStart: start - 1, Marker: "m-other2-0123456789abcdef"})
		}, false},
		{"owner alive", func(pid int, start uint64) groupRecord {
			r := groupRecord{PGID: pid, LeaderStart: start, Marker: "m-owned-0123456789abcdef"}
			r.BootID, r.OwnerPID, r.OwnerStart = boot, me, myStart
			return r
		}, true},
		{"another boot", func(pid int, start uint64) groupRecord {
			r := deadOwner(groupRecord{PGID: pid, LeaderStart: start, Marker: "m-boot-0123456789abcdef"})
			r.BootID = "00000000-0000-0000-0000-000000000000"
			return r
		}, false},
	}
	for _, tt := range spared {
		t.Run(tt.name, func(t *testing.T) {
			dir, tag := t.TempDir(), fmt.Sprintf("reap-spare-%d", time.Now().UnixNano())
			// An unrelated process tree: no marker of the record in its environment.
			cmd := startTree(t, tag, "")
			pid := cmd.Process.Pid
			path := forge(t, dir, tt.rec(pid, leaderStart(t, pid)))
			if n := ReapProcessGroups(ctx, dir, slog.Default()); n != 0 {
				t.Errorf("killed %d processes", n)
			}
			time.Sleep(100 * time.Millisecond)
			if !running(pid) || len(peertest.ProcessesWithArg(tag)) != 1 {
				t.Errorf("an unrelated process was killed")
			}
			if _, err := os.Stat(path); (err == nil) != tt.kept {
				t.Errorf("record kept = %v, want %v", err == nil, tt.kept)
			}
		})
	}
}

// TestStdioGroupRecord: a stdio child is recorded (with its group, the leader's start time and the marker in its
// environment) while it runs, and the record goes when the group is killed.
func TestStdioGroupRecord(t *testing.T) {
	dataDir := t.TempDir()
	tag := fmt.Sprintf("record-helper-%d", time.Now().UnixNano())
	cfg, _ := json.Marshal(connconfig.Config{Command: "bash", Args: []string{"-c", `exec -a "$0" sleep 1000 & exec cat`, tag}})
	b, err := Dial(persistence.Server{TransportType: persistence.TransportSTDIO, ConnectionConfig: cfg}, Options{Groups: NewProcGroups(dataDir, slog.Default())})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := b.transport.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pid := b.proc.cmd.Process.Pid
	raw, err := os.ReadFile(b.proc.group.path())
	if err != nil {
		t.Fatal(err)
	}
	var rec groupRecord
	if err := json.Unmarshal(raw, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.PGID != pid || rec.LeaderStart != leaderStart(t, pid) || rec.OwnerPID != os.Getpid() || rec.Marker == "" {
		t.Errorf("record %+v, leader %d", rec, pid)
	}
	waitFor(t, func() bool { return len(peertest.ProcessesWithArg(tag)) == 1 }, "the helper")
	if h := peertest.ProcessesWithArg(tag)[0]; !hasMarker(h, rec.Marker) {
		t.Errorf("the helper lacks the marker")
	}
	// A daemon starting now on the same directory leaves a running daemon's group alone.
	if n := ReapProcessGroups(context.Background(), dataDir, slog.Default()); n != 0 {
		t.Errorf("reaped %d processes of a live daemon", n)
	}
	b.kill()
	waitFor(t, func() bool { return len(peertest.ProcessesWithArg(tag)) == 0 }, "the helper to die")
	if _, err := os.Stat(b.proc.group.path()); !os.IsNotExist(err) {
		t.Errorf("record kept after the kill: %v", err)
	}
}
