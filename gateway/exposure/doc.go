// Package exposure decides which tools an MCP endpoint lists when the definitions of every tool it serves do not fit
// a model's token budget: the meta-tools, then the caller's recently used tools, then the catalogue's most used,
// taken from every server in turn, for as long as they fit. Tools left out stay callable by their alias and are
// found by search. It estimates tokens without a tokenizer's vocabulary (Tokens) and keeps the use counts the
// choice needs (Usage). Nothing here knows MCP or HTTP: the endpoint hands it sizes, names and calls.
package exposure
