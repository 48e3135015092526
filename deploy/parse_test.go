package deploy_test

// Readers for the files under test: README's configuration table, compose's variable interpolation, the
// Kubernetes objects (the fields the checks read), HAProxy's configuration and the Dockerfile. Each reads only
// what deploy_test.go checks, leniently: a field no check reads may be anything.

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// root is the repository root, seen from this package's directory.
const root = ".."

func readFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// configTable reads README's configuration table: variable -> default ("" for "(unset)"). TestConfigTableMatchesReadme
// (cmd/aggregator) keeps every row equal to the daemon's own table.
func configTable(t *testing.T) map[string]string {
	t.Helper()
	row := regexp.MustCompile("^\\| `([A-Z][A-Z0-9_]*)` \\| `([^`]*)` \\|")
	vars := map[string]string{}
	in := false
	for _, line := range strings.Split(readFile(t, "README.md"), "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			in = line == "## Configuration"
		case in:
			if m := row.FindStringSubmatch(line); m != nil {
				def := m[2]
				if def == "(unset)" {
					def = ""
				}
				vars[m[1]] = def
			}
		}
	}
	if len(vars) < 40 || vars["MCP_AGGREGATOR_LISTEN"] == "" {
		t.Fatalf("README's configuration table: read %d variables; has its format changed?", len(vars))
	}
	return vars
}

// ---- compose

// varRef is one ${...} reference of a compose file.
type varRef struct {
	Name     string
	Op       string // "", ":-", "-", ":?", "?", ":+", "+"
	Arg      string
	Required bool
}

var refRE = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])([^}]*))?\}`)

// composeRefs lists the ${...} references of a compose file's text.
func composeRefs(text string) []varRef {
	var refs []varRef
	for _, m := range refRE.FindAllStringSubmatch(strings.ReplaceAll(text, "$$", ""), -1) {
		refs = append(refs, varRef{Name: m[1], Op: m[2], Arg: m[3], Required: strings.HasSuffix(m[2], "?")})
	}
	return refs
}

// interpolate applies compose's interpolation with vars as the environment ($$ is a literal $). A required
// variable that is unset or empty is an error, as in compose.
func interpolate(text string, vars map[string]string) (string, error) {
	var errs []string
	const dollar = "\x00dollar\x00"
	out := refRE.ReplaceAllStringFunc(strings.ReplaceAll(text, "$$", dollar), func(s string) string {
		m := refRE.FindStringSubmatch(s)
		v, set := vars[m[1]]
		switch m[2] {
		case ":-":
			if v == "" {
				return m[3]
			}
		case "-":
			if !set {
				return m[3]
			}
		case ":?":
			if v == "" {
				errs = append(errs, m[1]+": "+m[3])
			}
		case "?":
			if !set {
				errs = append(errs, m[1]+": "+m[3])
			}
		case ":+":
			if v != "" {
				return m[3]
			}
			return ""
		case "+":
			if set {
				return m[3]
			}
			return ""
		}
		return v
	})
	if len(errs) > 0 {
		return "", fmt.Errorf("required variables unset: %s", strings.Join(errs, "; "))
	}
	return strings.ReplaceAll(out, dollar, "$"), nil
}

type composeFile struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
	Networks map[string]any            `yaml:"networks"`
}

type composeService struct {
	Image           string            `yaml:"image"`
	Build           *composeBuild     `yaml:"build"`
	User            string            `yaml:"user"`
	Hostname        string            `yaml:"hostname"`
	Environment     map[string]string `yaml:"environment"`
	Volumes         []string          `yaml:"volumes"`
	Ports           []string          `yaml:"ports"`
	StopGracePeriod string            `yaml:"stop_grace_period"`
	DependsOn       yaml.Node         `yaml:"depends_on"`
	Networks        []string          `yaml:"networks"`
	Healthcheck     *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
}

type composeBuild struct {
	Context    string `yaml:"context"`
	Dockerfile string `yaml:"dockerfile"`
	Target     string `yaml:"target"`
}

// dependsOn reads depends_on in either form: service -> condition ("" in the list form).
func (s composeService) dependsOn(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	switch s.DependsOn.Kind {
	case 0:
	case yaml.SequenceNode:
		var names []string
		if err := s.DependsOn.Decode(&names); err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			out[n] = ""
		}
	case yaml.MappingNode:
		var m map[string]struct {
			Condition string `yaml:"condition"`
		}
		if err := s.DependsOn.Decode(&m); err != nil {
			t.Fatal(err)
		}
		for n, c := range m {
			out[n] = c.Condition
		}
	default:
		t.Fatalf("depends_on: unexpected YAML %v", s.DependsOn.Kind)
	}
	return out
}

func yamlUnmarshal(text string, v any) error { return yaml.Unmarshal([]byte(text), v) }

func decodeCompose(t *testing.T, text string) composeFile {
	t.Helper()
	var c composeFile
	if err := yaml.Unmarshal([]byte(text), &c); err != nil {
		t.Fatalf("compose file: %v", err)
	}
	return c
}

// publishedPort is one entry of a service's ports (short syntax [ip:]host:container[/proto]).
type publishedPort struct{ HostIP, Host, Container string }

func parsePort(t *testing.T, s string) publishedPort {
	t.Helper()
	s = strings.TrimSuffix(strings.TrimSuffix(s, "/tcp"), "/udp")
	parts := strings.Split(s, ":")
	switch len(parts) {
	case 2:
		return publishedPort{Host: parts[0], Container: parts[1]}
	case 3:
		return publishedPort{HostIP: parts[0], Host: parts[1], Container: parts[2]}
	}
	t.Fatalf("ports entry %q: want [ip:]host:container", s)
	return publishedPort{}
}

// ---- Kubernetes

type k8sObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name      string            `yaml:"name"`
		Namespace string            `yaml:"namespace"`
		Labels    map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	File string    `yaml:"-"`
	Node yaml.Node `yaml:"-"`
}

func (o k8sObject) String() string { return o.Kind + "/" + o.Metadata.Name + " (" + o.File + ")" }

// decode reads the whole object into v.
func (o k8sObject) decode(t *testing.T, v any) {
	t.Helper()
	if err := o.Node.Decode(v); err != nil {
		t.Fatalf("%s: %v", o, err)
	}
}

// loadManifests reads every object of deploy/kubernetes/*.yaml (multi-document files), kustomization.yaml aside.
func loadManifests(t *testing.T) []k8sObject {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "deploy", "kubernetes", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	var objs []k8sObject
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var n yaml.Node
			if err := dec.Decode(&n); err != nil {
				if err.Error() == "EOF" {
					break
				}
				t.Fatalf("%s: %v", f, err)
			}
			var o k8sObject
			if err := n.Decode(&o); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if o.Kind == "" {
				continue // an empty document
			}
			o.File, o.Node = filepath.Base(f), n
			objs = append(objs, o)
		}
	}
	return objs
}

// intOrString is a port given by number or by name.
type intOrString struct{ S string }

func (p *intOrString) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a port number or name", n.Line)
	}
	p.S = n.Value
	return nil
}

type labelSelector struct {
	MatchLabels map[string]string `yaml:"matchLabels"`
}

// matches reports whether the selector selects an object with labels (matchLabels only; an empty selector
// matches nothing here, so that a forgotten selector is not taken for "everything").
func (s labelSelector) matches(labels map[string]string) bool {
	if len(s.MatchLabels) == 0 {
		return false
	}
	for k, v := range s.MatchLabels {
		if labels[k] != v {
			return false
		}
	}
	return true
}

type workload struct {
	Spec struct {
		ServiceName string        `yaml:"serviceName"`
		Replicas    *int          `yaml:"replicas"`
		Selector    labelSelector `yaml:"selector"`
		Template    struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec podSpec `yaml:"spec"`
		} `yaml:"template"`
		VolumeClaimTemplates []struct {
			Metadata struct {
				Name string `yaml:"name"`
			} `yaml:"metadata"`
		} `yaml:"volumeClaimTemplates"`
	} `yaml:"spec"`
}

type securityContext struct {
	RunAsNonRoot             *bool  `yaml:"runAsNonRoot"`
	RunAsUser                *int64 `yaml:"runAsUser"`
	AllowPrivilegeEscalation *bool  `yaml:"allowPrivilegeEscalation"`
	ReadOnlyRootFilesystem   *bool  `yaml:"readOnlyRootFilesystem"`
	Capabilities             *struct {
		Drop []string `yaml:"drop"`
	} `yaml:"capabilities"`
}

type podSpec struct {
	TerminationGracePeriodSeconds *int            `yaml:"terminationGracePeriodSeconds"`
	SecurityContext               securityContext `yaml:"securityContext"`
	Containers                    []container     `yaml:"containers"`
	InitContainers                []container     `yaml:"initContainers"`
	Volumes                       []struct {
		Name                  string `yaml:"name"`
		EmptyDir              any    `yaml:"emptyDir"`
		PersistentVolumeClaim any    `yaml:"persistentVolumeClaim"`
	} `yaml:"volumes"`
}

type container struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	EnvFrom []struct {
		ConfigMapRef *struct {
			Name string `yaml:"name"`
		} `yaml:"configMapRef"`
		SecretRef *struct {
			Name string `yaml:"name"`
		} `yaml:"secretRef"`
	} `yaml:"envFrom"`
	Env   []envEntry `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	StartupProbe   *probe `yaml:"startupProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	Lifecycle      *struct {
		PreStop *struct {
			Sleep *struct {
				Seconds int `yaml:"seconds"`
			} `yaml:"sleep"`
		} `yaml:"preStop"`
	} `yaml:"lifecycle"`
	SecurityContext *securityContext `yaml:"securityContext"`
	VolumeMounts    []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

type envEntry struct {
	Name      string  `yaml:"name"`
	Value     *string `yaml:"value"`
	ValueFrom *struct {
		SecretKeyRef *struct {
			Name     string `yaml:"name"`
			Key      string `yaml:"key"`
			Optional bool   `yaml:"optional"`
		} `yaml:"secretKeyRef"`
		ConfigMapKeyRef *struct {
			Name string `yaml:"name"`
			Key  string `yaml:"key"`
		} `yaml:"configMapKeyRef"`
		FieldRef *struct {
			FieldPath string `yaml:"fieldPath"`
		} `yaml:"fieldRef"`
	} `yaml:"valueFrom"`
}

type probe struct {
	HTTPGet *struct {
		Path string      `yaml:"path"`
		Port intOrString `yaml:"port"`
	} `yaml:"httpGet"`
	TCPSocket *struct {
		Port intOrString `yaml:"port"`
	} `yaml:"tcpSocket"`
	Exec *struct {
		Command []string `yaml:"command"`
	} `yaml:"exec"`
}

type service struct {
	Spec struct {
		ClusterIP                string            `yaml:"clusterIP"`
		PublishNotReadyAddresses bool              `yaml:"publishNotReadyAddresses"`
		SessionAffinity          string            `yaml:"sessionAffinity"`
		Selector                 map[string]string `yaml:"selector"`
		Ports                    []struct {
			Name       string      `yaml:"name"`
			Port       int         `yaml:"port"`
			TargetPort intOrString `yaml:"targetPort"`
		} `yaml:"ports"`
	} `yaml:"spec"`
}

type networkPolicy struct {
	Spec struct {
		PodSelector labelSelector `yaml:"podSelector"`
		PolicyTypes []string      `yaml:"policyTypes"`
		Ingress     []struct {
			From []struct {
				PodSelector       *labelSelector `yaml:"podSelector"`
				NamespaceSelector any            `yaml:"namespaceSelector"`
				IPBlock           any            `yaml:"ipBlock"`
			} `yaml:"from"`
			Ports []struct {
				Port intOrString `yaml:"port"`
			} `yaml:"ports"`
		} `yaml:"ingress"`
	} `yaml:"spec"`
}

// ---- HAProxy

type haproxySection struct {
	Kind, Name string   // "frontend", "backend", "defaults", ...
	Lines      []string // directives, comments and blank lines dropped
}

func parseHAProxy(text string) []haproxySection {
	var out []haproxySection
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		if line[0] != ' ' && line[0] != '\t' {
			f := strings.Fields(line)
			s := haproxySection{Kind: f[0]}
			if len(f) > 1 {
				s.Name = f[1]
			}
			out = append(out, s)
			continue
		}
		if len(out) > 0 {
			out[len(out)-1].Lines = append(out[len(out)-1].Lines, strings.Join(strings.Fields(line), " "))
		}
	}
	return out
}

// directive returns the arguments of every line of s that starts with the words of name.
func (s haproxySection) directive(name string) [][]string {
	var out [][]string
	for _, l := range s.Lines {
		if l == name || strings.HasPrefix(l, name+" ") {
			out = append(out, strings.Fields(strings.TrimPrefix(l, name)))
		}
	}
	return out
}

// ---- Dockerfile

type dockerStage struct {
	Base, Name   string
	Instructions [][2]string // {INSTRUCTION, rest of the line}, continuations joined
}

// last returns the arguments of the stage's last instruction named ins ("" when none).
func (s dockerStage) last(ins string) string {
	v := ""
	for _, i := range s.Instructions {
		if i[0] == ins {
			v = i[1]
		}
	}
	return v
}

// parseDockerfile returns the ARGs before the first FROM (name -> default) and the stages in order.
func parseDockerfile(t *testing.T, text string) (map[string]string, []dockerStage) {
	t.Helper()
	args := map[string]string{}
	var stages []dockerStage
	var cur strings.Builder
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		f := strings.SplitN(line, " ", 2)
		ins, rest := strings.ToUpper(f[0]), ""
		if len(f) > 1 {
			rest = strings.TrimSpace(f[1])
		}
		switch {
		case ins == "FROM":
			w := strings.Fields(rest)
			var s dockerStage
			for i := 0; i < len(w); i++ {
				switch {
				case strings.HasPrefix(w[i], "--"):
				case strings.EqualFold(w[i], "AS") && i+1 < len(w):
					s.Name = w[i+1]
					i++
				default:
					s.Base = w[i]
				}
			}
			stages = append(stages, s)
		case len(stages) == 0 && ins == "ARG":
			kv := strings.SplitN(rest, "=", 2)
			if len(kv) == 2 {
				args[kv[0]] = kv[1]
			} else {
				args[kv[0]] = ""
			}
		case len(stages) == 0:
			t.Fatalf("Dockerfile: %s before the first FROM", ins)
		default:
			s := &stages[len(stages)-1]
			s.Instructions = append(s.Instructions, [2]string{ins, rest})
		}
	}
	for _, raw := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(raw)
		if strings.HasPrefix(trimmed, "#") {
			continue // a comment, also inside a continued instruction
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		flush()
	}
	flush()
	return args, stages
}

// listenPort is the port of a host:port setting (-1 when it does not parse).
func listenPort(addr string) int {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return -1
	}
	n, err := strconv.Atoi(addr[i+1:])
	if err != nil {
		return -1
	}
	return n
}
