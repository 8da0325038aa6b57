package policy

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Shadow is the shadow block of a policy: candidate context-management policies the policy
// lab measures on a sample of the tenant's live Messages requests (package shadow), by asking
// count_tokens what each candidate's rewrite of the request would have read.
type Shadow struct {
	Sample       float64 // the share of eligible requests measured, 0 < Sample <= 1
	MaxPerMinute int     // the most count_tokens calls a minute the lab makes per candidate
	Candidates   []Candidate
}

// DefaultShadowMaxPerMinute is shadow.max_per_minute when a policy leaves it out.
const DefaultShadowMaxPerMinute = 60

// Candidate is one shadow policy: the tenant's policy with another context_management.
type Candidate struct {
	Name string
	Line int // line of its name, for messages
	// Policy is the tenant's policy with the candidate's context_management in place of its
	// own (memory, upstream and the rest unchanged): its Rewrite is the candidate's rewrite.
	// It has no Shadow of its own.
	Policy *Policy
	cm     ContextManagement // as read, until renderCandidates makes Policy
	index  int               // its place in shadow.candidates, for messages
}

// Compacts reports whether the candidate writes compact_20260112, whose effect count_tokens
// cannot show (it never compacts): the lab says so rather than pretend it measured it.
func (c *Candidate) Compacts() bool {
	return c.Policy.ContextManagement.Compact != nil && c.Policy.ContextManagement.Mode != CMOff
}

// candidateNameRe keeps candidate names usable as metric labels and in a table.
var candidateNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// cmPrefix finds context_management where a message names it, to say which candidate's it is.
var cmPrefix = regexp.MustCompile(`\bcontext_management\b`)

// shadow reads the shadow block. Each candidate's context_management is read by the same
// rules as the tenant's own; its messages name the candidate's (shadow.candidates[i].…).
func (ps *parser) shadow(n *yaml.Node) *Shadow {
	if isNull(n) {
		return nil
	}
	sh := &Shadow{MaxPerMinute: DefaultShadowMaxPerMinute}
	var sampleSeen, candidatesSeen bool
	ok := ps.fields(n, "shadow", []string{"sample", "max_per_minute", "candidates"}, func(key string, _, v *yaml.Node) {
		switch key {
		case "sample":
			sampleSeen = true
			sh.Sample = ps.sample(v)
		case "max_per_minute":
			if x, ok := ps.int(v, "shadow.max_per_minute", 1); ok {
				sh.MaxPerMinute = int(min(x, 1<<31-1))
			}
		case "candidates":
			candidatesSeen = true
			sh.Candidates, ps.shadowCMs = ps.candidates(v)
		}
	})
	if !ok {
		return nil
	}
	if !sampleSeen {
		ps.add(n.Line, "shadow needs a sample: the share of requests measured, greater than 0 and at most 1")
	}
	if !candidatesSeen {
		ps.add(n.Line, "shadow needs candidates: a list of {name, context_management}")
	}
	return sh
}

func (ps *parser) sample(n *yaml.Node) float64 {
	const where = "shadow.sample"
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!float" && n.Tag != "!!int") {
		ps.add(n.Line, "%s must be a number greater than 0 and at most 1, got %s", where, describe(n))
		return 0
	}
	f, err := strconv.ParseFloat(n.Value, 64)
	if err != nil || math.IsNaN(f) || f <= 0 || f > 1 {
		ps.add(n.Line, "%s must be greater than 0 and at most 1, got %s", where, n.Value)
		return 0
	}
	return f
}

// candidates reads shadow.candidates; the context_management nodes are returned beside them,
// read once the tenant's policy is whole (Policy.shadowCandidates).
func (ps *parser) candidates(n *yaml.Node) ([]Candidate, []*yaml.Node) {
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		ps.add(n.Line, "shadow.candidates must be a non-empty list of {name, context_management}, got %s", describe(n))
		return nil, nil
	}
	var out []Candidate
	var cms []*yaml.Node
	seen := map[string]int{}
	for i, item := range n.Content {
		item = resolve(item)
		where := fmt.Sprintf("shadow.candidates[%d]", i)
		c := Candidate{Line: item.Line, index: i}
		var cm *yaml.Node
		if !ps.fields(item, where, []string{"name", "context_management"}, func(key string, k, v *yaml.Node) {
			switch key {
			case "name":
				c.Line = v.Line
				name, ok := ps.str(v, where+".name")
				switch {
				case !ok:
				case !candidateNameRe.MatchString(name):
					ps.add(v.Line, "%s.name %q is not a valid name: up to 63 of lowercase letters, digits, '.', '_' and '-', starting with a letter or digit", where, name)
				default:
					c.Name = name
				}
			case "context_management":
				cm = v
			}
		}) {
			continue
		}
		if c.Name == "" {
			if !hasKey(item, "name") {
				ps.add(item.Line, "%s needs a name", where)
			}
			continue
		}
		if prev, dup := seen[c.Name]; dup {
			ps.add(c.Line, "%s.name %q is already the name of the candidate at line %d", where, c.Name, prev)
			continue
		}
		seen[c.Name] = c.Line
		if cm == nil || isNull(cm) {
			ps.add(item.Line, "%s needs a context_management (the same schema as the tenant's; {mode: off} for no edits)", where)
			continue
		}
		out = append(out, c)
		cms = append(cms, cm)
	}
	return out, cms
}

func hasKey(n *yaml.Node, key string) bool {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return true
		}
	}
	return false
}

// shadowCandidates reads each candidate's context_management (ps.shadowCMs, in the order of
// sh.Candidates) by the tenant's rules; problems are reported with the candidate's path.
func (ps *parser) shadowCandidates(sh *Shadow) {
	if sh == nil {
		return
	}
	for i := range sh.Candidates {
		sub := &parser{file: ps.file}
		cm := ContextManagement{Mode: CMDefault, Threads: DefaultThreads}
		sub.contextManagement(ps.shadowCMs[i], &cm)
		prefix := fmt.Sprintf("shadow.candidates[%d].context_management", sh.Candidates[i].index)
		for _, e := range sub.errs {
			e.Msg = cmPrefix.ReplaceAllLiteralString(e.Msg, prefix)
			ps.errs = append(ps.errs, e)
		}
		sh.Candidates[i].cm = cm
	}
}

// renderCandidates makes each candidate's policy, once p is whole: p with the candidate's
// context_management, rendered.
func (p *Policy) renderCandidates() error {
	if p.Shadow == nil {
		return nil
	}
	for i := range p.Shadow.Candidates {
		c := &p.Shadow.Candidates[i]
		cp, err := p.withContextManagement(c.cm)
		if err != nil {
			return fmt.Errorf("shadow candidate %s: %w", c.Name, err)
		}
		c.Policy = cp
	}
	return nil
}

// withContextManagement is a copy of p with cm in place of its context_management, its edits
// rendered anew, without a Shadow.
func (p *Policy) withContextManagement(cm ContextManagement) (*Policy, error) {
	cp := *p
	cp.Shadow = nil
	cp.ContextManagement = cm
	cp.clearThinkingJSON, cp.clearToolUsesJSON, cp.compactJSON, cp.compactPauseJSON = nil, nil, nil, nil
	cp.tenant = [2][2][3]tenantEdits{}
	if err := cp.render(); err != nil {
		return nil, err
	}
	return &cp, nil
}

// Candidate finds a shadow candidate by name.
func (sh *Shadow) Candidate(name string) (*Candidate, bool) {
	if sh == nil {
		return nil, false
	}
	for i := range sh.Candidates {
		if sh.Candidates[i].Name == name {
			return &sh.Candidates[i], true
		}
	}
	return nil, false
}

// summary is the shadow block in Policy.Summary.
func (sh *Shadow) summary() string {
	names := make([]string, len(sh.Candidates))
	for i, c := range sh.Candidates {
		names[i] = c.Name
		if c.Compacts() {
			names[i] += " (compact not measured)"
		}
	}
	return fmt.Sprintf("shadow: sample %s, %d/min per candidate (%s)",
		strconv.FormatFloat(sh.Sample, 'g', -1, 64), sh.MaxPerMinute, strings.Join(names, ", "))
}

// HasShadow reports whether the policy has shadow candidates (false for a nil policy).
func (p *Policy) HasShadow() bool { return p != nil && p.Shadow != nil }
