package placement

import (
	"io"
	"os"
	"os/exec"
	"testing"
)

// startTestChild runs this test binary again as a child process that runs only the test named run, with env added
// to its environment (the variable that test waits for), and returns it with its stdin and stdout. The caller
// decides how the child ends (closing its stdin, or a signal) in its own cleanup.
func startTestChild(t *testing.T, run string, env ...string) (*exec.Cmd, io.WriteCloser, io.ReadCloser) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+run+"$")
	cmd.Env = append(os.Environ(), env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, stdin, stdout
}
