package server

import "encoding/json"

// TitledMultiSelect reports whether an elicitation schema has a property go-sdk v1.8.0 refuses although SEP-1330
// allows it: an array of strings whose items list their choices by anyOf (titled) instead of enum. The go-sdk
// checks the schema where a client receives elicitation/create and where a server session gets the answer; the
// relay passes such a request around both checks (the backend that asked validates the answer). Remove when the
// go-sdk accepts the schema.
func TitledMultiSelect(schema any) bool {
	raw, err := json.Marshal(schema)
	if err != nil {
		return false
	}
	var s struct {
		Properties map[string]struct {
			Type  string `json:"type"`
			Items *struct {
				Type  string            `json:"type"`
				Enum  []json.RawMessage `json:"enum"`
				AnyOf []json.RawMessage `json:"anyOf"`
			} `json:"items"`
		} `json:"properties"`
	}
	if json.Unmarshal(raw, &s) != nil {
		return false
	}
	for _, p := range s.Properties {
		if p.Type == "array" && p.Items != nil && p.Items.Type == "string" && p.Items.Enum == nil && len(p.Items.AnyOf) > 0 {
			return true
		}
	}
	return false
}
