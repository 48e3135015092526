package loadgen

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// HTTPClient keeps enough idle keep-alive connections for every concurrent caller (the default transport keeps
// two per host, which at saturation would open a new connection for most calls). It has no Client.Timeout: that
// would also cut an MCP session's long-lived standalone SSE stream (every request carries a context deadline
// instead).
func HTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 512
	t.MaxIdleConnsPerHost = 512
	return &http.Client{Transport: t}
}

// MCPCaller calls a tool with {"message": message} over an MCP session; a result flagged isError is a failure.
func MCPCaller(sess *mcp.ClientSession, tool, message string) Caller {
	args := map[string]any{"message": message}
	return func(ctx context.Context) error {
		res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			return fmt.Errorf("call %s: %w", tool, err)
		}
		if res.IsError {
			return fmt.Errorf("call %s: the tool reported an error", tool)
		}
		return nil
	}
}

// RESTCaller calls a tool with {"message": message} through the daemon's POST /api/v1/tools/call (url); anything
// but 200 is a failure.
func RESTCaller(client *http.Client, url, tool, message string) Caller {
	body := []byte(fmt.Sprintf(`{"name":%q,"arguments":{"message":%q}}`, tool, message))
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body))
		if err != nil {
			return fmt.Errorf("request: %w", err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("call %s: %w", tool, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("call %s: status %d", tool, resp.StatusCode)
		}
		return nil
	}
}
