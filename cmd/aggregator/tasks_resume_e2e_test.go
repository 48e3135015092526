package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx": the tests read the task rows
	_ "modernc.org/sqlite"             // database/sql driver "sqlite"

	"github.com/mcpgw/aggregator/internal/peertest"
	"github.com/mcpgw/aggregator/persistence/pgtest"
)

// taskREST sends a REST request under api (".../api/v1") and decodes the JSON answer.
func taskREST(t *testing.T, api, method, path string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, api+path, rd)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, map[string]any{"transport_error": err.Error()}
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// taskRows reads task rows straight from a daemon's store (PostgreSQL at dbURL, or the SQLite file in dataDir).
type taskRows struct{ db *sql.DB }

func openTaskRows(t *testing.T, dbURL, dataDir string) taskRows {
	t.Helper()
	driver, dsn := "pgx", dbURL
	if dbURL == "" {
		driver, dsn = "sqlite", "file:"+filepath.Join(dataDir, "aggregator.db")+"?mode=ro&_pragma=busy_timeout(5000)"
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return taskRows{db: db}
}

// backend is the backend's task id and server id stored on task id ("" while none is recorded).
func (r taskRows) backend(id string) (string, string) {
	table := "tasks"
	if _, err := r.db.Exec(`SELECT 1 FROM mcp.tasks LIMIT 0`); err == nil {
		table = "mcp.tasks"
	}
	var task, server string
	_ = r.db.QueryRowContext(context.Background(), `SELECT backend_task_id, backend_server FROM `+table+` WHERE id = $1`, id).Scan(&task, &server)
	return task, server
}

// status is the stored status of task id ("" when it cannot be read).
func (r taskRows) status(id string) string {
	table := "tasks"
	if _, err := r.db.Exec(`SELECT 1 FROM mcp.tasks LIMIT 0`); err == nil {
		table = "mcp.tasks"
	}
	var status string
	_ = r.db.QueryRowContext(context.Background(), `SELECT status FROM `+table+` WHERE id = $1`, id).Scan(&status)
	return status
}

// waitTask long-polls a task through REST until it is final (or within passes) and returns it.
func waitTask(t *testing.T, api, id string, within time.Duration) map[string]any {
	t.Helper()
	var last map[string]any
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		code, got := taskREST(t, api, "GET", "/tasks/"+id+"?wait=10", nil)
		last = got
		if code == 200 && got["status"] != "working" && got["status"] != "input_required" {
			return got
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("task %s not final within %v: %v", id, within, last)
	return nil
}

// TestClusterTaskResumedAfterOwnerKilledE2E: three nodes (automanaged, PostgreSQL). A task is started through node
// A, which owns the HTTP server whose tool runs as a backend task for several seconds; the backend's task id is
// recorded on the task row. A is killed (SIGKILL) while the backend's task runs; another node claims the task,
// follows the backend's task again on its own session to the server (taken over from A), and the result is read
// through node B, over REST and over /mcp (tasks/get, tasks/result on a new session).
func TestClusterTaskResumedAfterOwnerKilledE2E(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	backend := peertest.StartTaskBackend(t)
	db := pgtest.NewDatabase(t)
	health := []int{peertest.FreePort(t), peertest.FreePort(t), peertest.FreePort(t)}
	peers := fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", health[0], health[1], health[2])
	nodes := newCluster(t, 3, db, func(i int) []string {
		return []string{"MCP_AGGREGATOR_CLUSTER=automanaged", "MCP_AGGREGATOR_CLUSTER_PEERS=" + peers,
			fmt.Sprintf("MCP_AGGREGATOR_CLUSTER_HEALTH_PORT=%d", health[i])}
	})
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range nodes {
				t.Logf("%s logs:\n%s", n.name, nodeLog(n))
			}
		}
	})
	code, s := nodes[0].do("POST", "/servers", map[string]any{"name": "tb", "transport_type": "HTTP",
		"connection_config": map[string]any{"base_url": backend.URL(), "allow_insecure_http": true}})
	if code != 201 {
		t.Fatalf("register: %d %v", code, s)
	}
	var a, b *clusterNode
	waitFor(t, 60*time.Second, "the server's session on some node", func() bool {
		for _, n := range nodes {
			if sess, _ := n.backendSessions(t); sess["tb"] {
				a = n
				return true
			}
		}
		return false
	})
	for _, n := range nodes {
		if n != a {
			b = n
			break
		}
	}
	apiA, apiB := a.rest+"/api/v1", b.rest+"/api/v1"
	// The owner lists the tool once it discovered it (a task needs the backend's taskSupport).
	waitFor(t, 30*time.Second, "tb.countdown callable through "+a.name, func() bool {
		code, got := taskREST(t, apiA, "POST", "/tools/call", map[string]any{"name": "tb.quick", "arguments": map[string]any{"text": "x"}, "task": map[string]any{}})
		if code != 202 {
			return false
		}
		done := waitTask(t, apiA, got["task_id"].(string), 20*time.Second)
		return done["status"] == "completed"
	})

	code, started := taskREST(t, apiA, "POST", "/tools/call", map[string]any{"name": "tb.countdown",
		"arguments": map[string]any{"ms": 12000, "text": "survived"}, "task": map[string]any{"ttl_ms": 300000}})
	if code != 202 {
		t.Fatalf("task call through %s: %d %v", a.name, code, started)
	}
	id := started["task_id"].(string)
	rows := openTaskRows(t, db, "")
	var backendTask, backendServer string
	waitFor(t, 10*time.Second, "the backend's task recorded on the task", func() bool {
		backendTask, backendServer = rows.backend(id)
		return backendTask != ""
	})
	if backendServer != s["id"] {
		t.Errorf("backend server recorded = %q, want the server's id %v", backendServer, s["id"])
	}
	t.Logf("task %s follows backend task %s; killing %s (%s)", id, backendTask, a.name, a.id)
	killed := time.Now()
	a.signal(syscall.SIGKILL, 5*time.Second)

	got := waitTask(t, apiB, id, 90*time.Second)
	if got["status"] != "completed" || !strings.Contains(jsonString(got["result"]), "countdown done: survived") {
		t.Fatalf("task through %s after %s was killed: %v", b.name, a.name, got)
	}
	t.Logf("task completed through %s %v after the kill", b.name, time.Since(killed).Round(100*time.Millisecond))
	resumedBy := ""
	for _, n := range nodes {
		if n != a && strings.Contains(n.logs.String(), "following again the backend task") && strings.Contains(n.logs.String(), id) {
			resumedBy = n.name
		}
	}
	if resumedBy == "" {
		t.Errorf("no survivor logged that it followed the backend's task again")
	}
	// A new MCP session on B (the same anonymous caller) reads the task and its result.
	sess := openMCP(t, b.mcp+"/mcp")
	if w := sess.taskGet(id); w.Status != "completed" {
		t.Errorf("tasks/get through %s: %+v", b.name, w)
	}
	if res, rerr := sess.post("tasks/result", map[string]any{"taskId": id}); rerr != nil || !strings.Contains(string(res), "countdown done: survived") {
		t.Errorf("tasks/result through %s: %s %v", b.name, res, rerr)
	}
}

// TestTasksResumedAfterRestart, on both stores: a daemon follows two backend tasks, one on an HTTP server (the
// TypeScript SDK task backend, which outlives the daemon) and one on a stdio server (server-everything's
// simulate-research-query, whose child dies with the daemon); each backend task's id is on its task row. The daemon
// is killed (SIGKILL) and started again: it claims its own open tasks, the HTTP one completes with the backend
// task's result, and the stdio one fails with the reason (the child that ran it stopped with the daemon). A clean
// stop (SIGTERM) leaves a task that follows an HTTP backend's task open, and the restarted daemon completes it.
func TestTasksResumedAfterRestart(t *testing.T) {
	t.Parallel() // waits on its own daemons, ports and stores: overlaps another (README, Tests)
	backend := peertest.StartTaskBackend(t)
	cmd, args := peertest.EverythingStdio(t)
	for name, dbURL := range stores() {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // the stores' runs are independent: each its own daemon and database
			url := dbURL(t)
			d := newDaemon(t, url)
			// A short drain: the clean stop below must end before the backend's task does.
			d.env = setEnv(d.env, "MCP_AGGREGATOR_SHUTDOWN_TIMEOUT", "1")
			d.start()
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("daemon logs:\n%s", tail(d.logs.String(), 6000))
				}
			})
			api := strings.TrimSuffix(d.base, "/aggregator")
			ids := map[string]string{}
			for _, srv := range []map[string]any{
				{"name": "tb", "transport_type": "HTTP", "connection_config": map[string]any{"base_url": backend.URL(), "allow_insecure_http": true}},
				{"name": "every", "transport_type": "STDIO", "connection_config": map[string]any{"command": cmd, "args": args}},
			} {
				code, s := d.do("POST", "/servers", srv)
				if code != 201 {
					t.Fatalf("register %v: %d %v", srv["name"], code, s)
				}
				d.waitStatus(s["id"].(string), "CONNECTED", 30*time.Second)
				ids[srv["name"].(string)] = s["id"].(string)
			}
			rows := openTaskRows(t, url, envValue(d.env, "MCP_AGGREGATOR_DATA_DIR"))
			start := func(tool string, args map[string]any) string {
				t.Helper()
				var id string
				waitFor(t, 20*time.Second, "the backend's task of "+tool+" recorded", func() bool {
					if id == "" {
						code, got := taskREST(t, api, "POST", "/tools/call", map[string]any{"name": tool, "arguments": args, "task": map[string]any{}})
						if code != 202 {
							t.Fatalf("task call %s: %d %v", tool, code, got)
						}
						id = got["task_id"].(string)
					}
					backendTask, _ := rows.backend(id)
					if backendTask == "" {
						// Not a backend task (the tool's taskSupport not yet listed): wait for it to end, then again.
						if _, got := taskREST(t, api, "GET", "/tasks/"+id, nil); got["status"] != "working" {
							id = ""
						}
						return false
					}
					return true
				})
				return id
			}
			httpTask := start("tb.countdown", map[string]any{"ms": 6000, "text": "after the restart"})
			stdioTask := start("every.simulate-research-query", map[string]any{"topic": "restarts"})
			if _, server := rows.backend(httpTask); server != ids["tb"] {
				t.Errorf("backend server of the HTTP task = %q, want %s", server, ids["tb"])
			}

			d.signal(syscall.SIGKILL, 5*time.Second)
			d.start()

			got := waitTask(t, api, httpTask, 60*time.Second)
			if got["status"] != "completed" || !strings.Contains(jsonString(got["result"]), "countdown done: after the restart") {
				t.Errorf("HTTP backend task after the restart: %v", got)
			}
			got = waitTask(t, api, stdioTask, 60*time.Second)
			if msg, _ := got["status_message"].(string); got["status"] != "failed" || !strings.Contains(msg, "stdio child process") {
				t.Errorf("stdio backend task after the restart: %v, want failed with the stdio reason", got)
			} else {
				t.Logf("stdio task after the restart: %s", msg)
			}

			// A clean stop hands the task over too: the backend's task is left running (no tasks/cancel), the row
			// stays open, and the restarted daemon follows it to its end.
			handed := start("tb.countdown", map[string]any{"ms": 5000, "text": "after a clean stop"})
			d.signal(syscall.SIGTERM, 15*time.Second)
			if status := rows.status(handed); status != "working" {
				t.Errorf("task following a backend's task after SIGTERM = %q, want working (left for a resumption)", status)
			}
			d.start()
			got = waitTask(t, api, handed, 60*time.Second)
			if got["status"] != "completed" || !strings.Contains(jsonString(got["result"]), "countdown done: after a clean stop") {
				t.Errorf("HTTP backend task after a clean stop and restart: %v", got)
			}
			d.signal(syscall.SIGTERM, 15*time.Second)
		})
	}
}

// setEnv is env with name set to value (replacing its entries).
func setEnv(env []string, name, value string) []string {
	out := make([]string, 0, len(env)+1)
	for _, e := range env {
		if !strings.HasPrefix(e, name+"=") {
			out = append(out, e)
		}
	}
	return append(out, name+"="+value)
}

// envValue is the value of name in env ("NAME=value" entries; the last wins).
func envValue(env []string, name string) string {
	v := ""
	for _, e := range env {
		if rest, ok := strings.CutPrefix(e, name+"="); ok {
			v = rest
		}
	}
	return v
}
