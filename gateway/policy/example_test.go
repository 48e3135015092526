package policy_test

import (
	"fmt"

	"github.com/mcpgw/aggregator/gateway/policy"
)

func Example() {
	set, err := policy.Compile(policy.Document{Rules: []policy.Rule{
		{Name: "ci-read-only", Effect: policy.Deny, When: `subject == "ci" && !annotations.?readOnlyHint.orValue(false)`},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	write := policy.Input{Subject: "ci", Server: "fs", Tool: "write_file", Name: "fs.write_file"}
	d := set.Decide(&write)
	fmt.Println(d.Allowed, d.Rule)

	_, err = policy.Compile(policy.Document{Rules: []policy.Rule{{Name: "typo", Effect: policy.Deny, When: `sbject == "ci"`}}})
	fmt.Println(err)
	// Output:
	// false ci-read-only
	// rules.0.when: line 1, column 1: undeclared reference to 'sbject' (in container '')
}
