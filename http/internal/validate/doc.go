// Package validate holds the rules of the requests more than one front end takes: registering, changing and
// disconnecting a server (POST/PATCH /servers, add_mcp_server), searching tools (POST /api/v1/search,
// search_aggregated_tools) and calling one (POST /api/v1/tools/call, execute_external_tool, a direct MCP call).
// Each rule is declared once, as a JSON Schema (jsonschema-go) that the MCP meta-tools publish as their input
// schema and that the validators read their keys, enums and bounds from, and each validator reports every problem
// at once in the 422 shape of system-contract.md (FastAPI's {loc, msg, type} list, strictjson). It imports no HTTP
// framework: REST (Fiber) and the MCP endpoints (net/http, stdio) only render what it answers.
//
// The validators are hand-written on top of the schemas rather than run by a generic JSON Schema validator: the
// contract fixes the messages and the order of the field errors, refuses duplicate keys (which JSON Schema cannot
// see) and caps the list at 50.
package validate
