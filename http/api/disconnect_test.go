package api

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
)

// TestWatchDisconnect: a tool call whose client hangs up while it runs is cancelled (the watcher, started by a
// timer once the call has run disconnectWatchDelay, sees the hang-up), and a call that answers is not.
func TestWatchDisconnect(t *testing.T) {
	s := &server{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ended := make(chan bool, 1) // true: the call's context was cancelled
	app := fiber.New()
	app.Post("/hangup", s.watchDisconnect, func(c *fiber.Ctx) error {
		select {
		case <-c.UserContext().Done():
			ended <- true
		case <-time.After(30 * time.Second):
			ended <- false
		}
		return nil
	})
	app.Post("/quick", s.watchDisconnect, func(c *fiber.Ctx) error {
		if c.UserContext().Err() != nil {
			return c.SendStatus(fiber.StatusGone)
		}
		return c.SendString("done")
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = app.Listener(ln) }()
	t.Cleanup(func() { _ = app.Shutdown() })

	// A call that answers: served, its context never cancelled.
	resp, err := http.Post("http://"+ln.Addr().String()+"/quick", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "done" {
		t.Fatalf("quick call: %d %q", resp.StatusCode, body)
	}

	// A client that hangs up during the call: the call is cancelled.
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, "POST /hangup HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	conn.Close() // the client leaves before the answer

	if cancelled := <-ended; !cancelled {
		t.Fatal("the call of a client that hung up was not cancelled")
	}
}
