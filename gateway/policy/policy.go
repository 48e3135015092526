// Package policy is the aggregator's access policy: ordered rules, written as CEL expressions, that decide which
// caller may list and call which tool. It exists apart from the gateway that applies it (Gateway's Policy hook) and
// from the store that keeps it, so that the rules' language, their validation and their evaluation are one small
// thing to test, fuzz and benchmark.
//
// Semantics: a Document is a default effect and an ordered list of rules, each with a name, an effect (allow or
// deny) and a boolean expression. A call is decided by the first rule whose expression is true: its effect
// applies and the rule is named in the answer. When none matches, the default applies ("allow" unless the
// document says "deny"). With no rules and the default allow, every call is allowed: today's behaviour.
//
// Expressions see, for a call:
//
//	subject      string               the caller: the OAuth token's subject, a static token's name, "anonymous"
//	claims       map(string, dyn)     the OAuth access token's claims ({} for static tokens and anonymous callers)
//	role         string               "admin" or "client"
//	server       string               the server's name
//	tool         string               the tool's original name (the backend's)
//	name         string               the tool's namespaced name ({server}.{tool})
//	skills       list(string)         the tool's skills (its classifier's skill ids)
//	annotations  map(string, dyn)     the tool's MCP annotations (readOnlyHint, destructiveHint, ...), as served
//	args         map(string, dyn)     the call's arguments
//	action       string               "call", or "list" when deciding whether a tool is listed
//
// Listing (tools/list, search) has no arguments: a tool is listed when some call of it could be allowed. Rules are
// then evaluated with args unknown: a rule whose outcome depends on the arguments stops the walk when it allows
// (some call is allowed) and is passed over when it denies (some call is not denied by it).
//
// Errors: a document that does not validate, or an expression that does not compile or is not boolean, is a
// *ValidationError naming the rule, the field and, for an expression, the line and column. An expression that
// fails while evaluating (a missing map key, a type mismatch, the cost limit) denies: the policy fails closed, and
// Decision.Err says why (without the arguments' values).
package policy

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
)

// Effects of a rule, and of a document's default.
const (
	Allow = "allow"
	Deny  = "deny"
)

// Actions an expression sees in action.
const (
	ActionCall = "call"
	ActionList = "list"
)

// Limits of a document.
const (
	MaxRules      = 256
	MaxExprLength = 4096
	MaxNameLength = 64
	// costLimit bounds one expression's evaluation (CEL's cost units; a comparison is 1), so that a rule cannot
	// make a call slow, whatever its arguments.
	costLimit = 100_000
)

// Rule is one rule: when its expression is true, its effect decides.
type Rule struct {
	Name        string `json:"name"`
	Effect      string `json:"effect"`
	When        string `json:"when"`
	Description string `json:"description,omitempty"`
}

// Document is the whole policy: the rules in order and the effect when none matches ("" is allow).
type Document struct {
	Default string `json:"default"`
	Rules   []Rule `json:"rules"`
}

// ValidationError is a document that cannot be compiled: Loc is where ("rules", 2, "when"), Msg what; for an
// expression Line and Column (1-based) say where in it.
type ValidationError struct {
	Loc          []any
	Msg          string
	Line, Column int
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Loc))
	for i, p := range e.Loc {
		parts[i] = fmt.Sprint(p)
	}
	return strings.Join(parts, ".") + ": " + e.Msg
}

var ruleName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]*$`)

// Input is what one decision is about. Arguments is the call's JSON object, decoded only when some rule reads
// args; nil while listing.
type Input struct {
	Subject     string
	Claims      map[string]any
	Role        string
	Server      string
	Tool        string
	Name        string
	Skills      []string
	Annotations map[string]any
	Arguments   map[string]any
}

// Decision is the outcome of a policy for one input: Rule names the rule that decided ("" when the default did),
// and Err is set when an expression failed, which denies.
type Decision struct {
	Allowed bool
	Rule    string
	Err     error
}

// Set is a compiled document: safe for concurrent use, evaluated without compiling again.
type Set struct {
	doc   Document
	deflt bool
	rules []compiled
	reads map[string]bool // the variables some rule reads
}

type compiled struct {
	name    string
	allow   bool
	prg     cel.Program // for calls
	partial cel.Program // for listing: args unknown
}

// env declares the variables every expression sees.
func env() (*cel.Env, error) {
	dynMap := cel.MapType(cel.StringType, cel.DynType)
	return cel.NewEnv(
		cel.Variable("subject", cel.StringType),
		cel.Variable("claims", dynMap),
		cel.Variable("role", cel.StringType),
		cel.Variable("server", cel.StringType),
		cel.Variable("tool", cel.StringType),
		cel.Variable("name", cel.StringType),
		cel.Variable("skills", cel.ListType(cel.StringType)),
		cel.Variable("annotations", dynMap),
		cel.Variable("args", dynMap),
		cel.Variable("action", cel.StringType),
		cel.OptionalTypes(),
	)
}

// Compile validates doc and compiles its expressions. The zero Document compiles to a Set that allows everything.
func Compile(doc Document) (*Set, error) {
	s := &Set{doc: doc, deflt: true}
	switch doc.Default {
	case "", Allow:
	case Deny:
		s.deflt = false
	default:
		return nil, &ValidationError{Loc: []any{"default"}, Msg: `default must be "allow" or "deny"`}
	}
	if len(doc.Rules) > MaxRules {
		return nil, &ValidationError{Loc: []any{"rules"}, Msg: fmt.Sprintf("at most %d rules", MaxRules)}
	}
	if len(doc.Rules) == 0 {
		return s, nil
	}
	e, err := env()
	if err != nil {
		return nil, fmt.Errorf("policy environment: %w", err)
	}
	seen := make(map[string]bool, len(doc.Rules))
	s.reads = map[string]bool{}
	for i, r := range doc.Rules {
		at := func(field, msg string) error { return &ValidationError{Loc: []any{"rules", i, field}, Msg: msg} }
		switch {
		case r.Name == "":
			return nil, at("name", "name is required")
		case len(r.Name) > MaxNameLength || !ruleName.MatchString(r.Name):
			return nil, at("name", fmt.Sprintf("name must be at most %d letters, digits, '_', '.', ':' or '-', starting with a letter or digit", MaxNameLength))
		case seen[r.Name]:
			return nil, at("name", fmt.Sprintf("rule name %q is used twice", r.Name))
		case r.Effect != Allow && r.Effect != Deny:
			return nil, at("effect", `effect must be "allow" or "deny"`)
		case strings.TrimSpace(r.When) == "":
			return nil, at("when", "when is required (write true for a rule that always matches)")
		case len(r.When) > MaxExprLength:
			return nil, at("when", fmt.Sprintf("expression longer than %d bytes", MaxExprLength))
		}
		seen[r.Name] = true
		c, verr := compileRule(e, r, s.reads)
		if verr != nil {
			verr.Loc = []any{"rules", i, "when"}
			return nil, verr
		}
		s.rules = append(s.rules, c)
	}
	return s, nil
}

// compileRule compiles one expression into its two programs and adds the variables it reads to reads.
func compileRule(e *cel.Env, r Rule, reads map[string]bool) (compiled, *ValidationError) {
	ast, iss := e.Compile(r.When)
	if iss != nil && iss.Err() != nil {
		verr := &ValidationError{Msg: iss.Err().Error()}
		if errs := iss.Errors(); len(errs) > 0 {
			loc := errs[0].Location
			verr.Line, verr.Column = loc.Line(), loc.Column()+1
			verr.Msg = fmt.Sprintf("line %d, column %d: %s", verr.Line, verr.Column, errs[0].Message)
		}
		return compiled{}, verr
	}
	if !ast.OutputType().IsExactType(types.BoolType) {
		return compiled{}, &ValidationError{Line: 1, Column: 1,
			Msg: fmt.Sprintf("line 1, column 1: the expression must be a bool, not %s", ast.OutputType())}
	}
	prg, err := e.Program(ast, cel.CostLimit(costLimit), cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return compiled{}, &ValidationError{Line: 1, Column: 1, Msg: "line 1, column 1: " + err.Error()}
	}
	partial, err := e.Program(ast, cel.CostLimit(costLimit), cel.EvalOptions(cel.OptOptimize, cel.OptPartialEval))
	if err != nil {
		return compiled{}, &ValidationError{Line: 1, Column: 1, Msg: "line 1, column 1: " + err.Error()}
	}
	for _, ref := range ast.NativeRep().ReferenceMap() {
		if ref.Name != "" {
			reads[ref.Name] = true
		}
	}
	return compiled{name: r.Name, allow: r.Effect == Allow, prg: prg, partial: partial}, nil
}

// Document is the document the set was compiled from.
func (s *Set) Document() Document {
	if s == nil {
		return Document{Default: Allow, Rules: []Rule{}}
	}
	d := s.doc
	if d.Default == "" {
		d.Default = Allow
	}
	if d.Rules == nil {
		d.Rules = []Rule{}
	}
	return d
}

// Empty reports whether the set allows everything without looking (no rule, default allow): callers may skip
// building an Input.
func (s *Set) Empty() bool { return s == nil || (len(s.rules) == 0 && s.deflt) }

// Reads reports whether some rule reads a variable ("args", "annotations", ...): only then must a caller build
// that part of an Input (decode a call's arguments, a tool's annotations).
func (s *Set) Reads(variable string) bool { return s != nil && s.reads[variable] }

// ErrNotBool is an expression that evaluated to something other than a bool (possible only through dyn values).
var ErrNotBool = errors.New("expression is not a bool")

// Decide decides a call.
func (s *Set) Decide(in *Input) Decision {
	if s.Empty() {
		return Decision{Allowed: true}
	}
	act := activation{in: in, action: ActionCall}
	for i := range s.rules {
		r := &s.rules[i]
		out, _, err := r.prg.Eval(&act)
		if d, decided := r.verdict(out, err); decided {
			return d
		}
	}
	return Decision{Allowed: s.deflt}
}

// Listed decides whether a tool is listed to a caller: whether some call of it could be allowed (in.Arguments is
// ignored). A rule that fails denies, as for a call.
func (s *Set) Listed(in *Input) Decision {
	if s.Empty() {
		return Decision{Allowed: true}
	}
	act := activation{in: in, action: ActionList, unknownArgs: true}
	pact, err := cel.PartialVars(&act, cel.AttributePattern("args"))
	if err != nil {
		return Decision{Err: err}
	}
	for i := range s.rules {
		r := &s.rules[i]
		out, _, err := r.partial.Eval(pact)
		if types.IsUnknown(out) {
			if r.allow {
				return Decision{Allowed: true, Rule: r.name}
			}
			continue
		}
		if d, decided := r.verdict(out, err); decided {
			return d
		}
	}
	return Decision{Allowed: s.deflt}
}

// verdict reads one rule's evaluation: an error or a non-boolean decides (the caller denies on Err), true decides
// by the rule's effect, false passes to the next rule.
func (r *compiled) verdict(out ref.Val, err error) (Decision, bool) {
	if err != nil {
		return Decision{Rule: r.name, Err: err}, true
	}
	b, ok := out.(types.Bool)
	if !ok {
		return Decision{Rule: r.name, Err: ErrNotBool}, true
	}
	if b {
		return Decision{Allowed: r.allow, Rule: r.name}, true
	}
	return Decision{}, false
}

// activation resolves the variables from an Input without building a map per evaluation.
type activation struct {
	in          *Input
	action      string
	unknownArgs bool
}

var emptyMap = map[string]any{}

func (a *activation) ResolveName(name string) (any, bool) {
	in := a.in
	switch name {
	case "subject":
		return in.Subject, true
	case "claims":
		return orEmpty(in.Claims), true
	case "role":
		return in.Role, true
	case "server":
		return in.Server, true
	case "tool":
		return in.Tool, true
	case "name":
		return in.Name, true
	case "skills":
		if in.Skills == nil {
			return []string{}, true
		}
		return in.Skills, true
	case "annotations":
		return orEmpty(in.Annotations), true
	case "args":
		if a.unknownArgs {
			return nil, false
		}
		return orEmpty(in.Arguments), true
	case "action":
		return a.action, true
	}
	return nil, false
}

func (a *activation) Parent() interpreter.Activation { return nil }

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return emptyMap
	}
	return m
}
