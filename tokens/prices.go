package tokens

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/ctxproxy/ctxproxy/internal/modelid"
	"github.com/ctxproxy/ctxproxy/internal/yamldoc"
	"gopkg.in/yaml.v3"
)

// Price is one model's list price, in Money per token (= USD per million tokens × 1000).
type Price struct {
	Input, Output, CacheWrite, CacheWrite1h, CacheRead Money
}

// PriceEntry is one entry of prices.yaml: a model matched exactly (Model), or a model and its
// dated snapshots (Prefix; matched by modelid, never another model whose id starts with it).
type PriceEntry struct {
	Model, Prefix string
	Price         Price
	// LongPrompt, when set, prices a call whose prompt is longer (Haiku 5.5 is priced by prompt
	// length); nil: one price whatever the length.
	LongPrompt *LongPrompt
	Line       int // line in the file, for messages
}

// LongPrompt is the price of a model's calls whose prompt (input, cache reads and cache writes)
// is over ThresholdTokens: every token of such a call, output included, is at Price.
type LongPrompt struct {
	ThresholdTokens int64
	Price           Price
}

// For is the price of one model call with usage u: the long-prompt price when the entry has one
// and u's prompt is over its threshold, else the entry's price.
func (e *PriceEntry) For(u Usage) Price {
	if lp := e.LongPrompt; lp != nil && u.TotalInput() > lp.ThresholdTokens {
		return lp.Price
	}
	return e.Price
}

// Ceiling is the highest price any call of the model can pay per token of each kind, which a
// spend cap holds for a request before its prompt's length is known.
func (e *PriceEntry) Ceiling() Price {
	pr := e.Price
	if lp := e.LongPrompt; lp != nil {
		pr.Input, pr.Output = max(pr.Input, lp.Price.Input), max(pr.Output, lp.Price.Output)
		pr.CacheWrite, pr.CacheWrite1h = max(pr.CacheWrite, lp.Price.CacheWrite), max(pr.CacheWrite1h, lp.Price.CacheWrite1h)
		pr.CacheRead = max(pr.CacheRead, lp.Price.CacheRead)
	}
	return pr
}

// Label is the bounded name this entry stands for in metrics: the model or the prefix.
func (e *PriceEntry) Label() string {
	if e.Model != "" {
		return e.Model
	}
	return e.Prefix
}

// Prices maps model names to list prices. Immutable once loaded; safe for concurrent use.
type Prices struct {
	exact   map[string]*PriceEntry // model: entries
	named   map[string]*PriceEntry // prefix: entries, by their model
	entries []*PriceEntry          // file order
	factors Factors
	// factorsSet: the file set factors or web_search_per_1000 (Over keeps them).
	factorsSet bool
}

// Factors are the table's price factors (DefaultFactors unless the file sets them).
func (p *Prices) Factors() Factors {
	if p == nil {
		return DefaultFactors
	}
	return p.factors
}

// LoadPrices reads a prices.yaml file.
func LoadPrices(path string) (*Prices, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load prices: %w", err)
	}
	p, err := ParsePrices(b)
	if err != nil {
		return nil, fmt.Errorf("load prices %s: %w", path, err)
	}
	return p, nil
}

// ParsePrices parses prices.yaml content:
//
//	models:
//	  - prefix: claude-sonnet-4-5   # this model and its dated snapshots; or model: <exact name>
//	    input: 3                    # USD per million tokens, at most 3 decimals
//	    output: 15
//	    cache_write: 3.75           # 5-minute cache write; optional, default factors.cache_write × input
//	    cache_write_1h: 6           # optional; default factors.cache_write_1h × input
//	    cache_read: 0.30            # optional; default factors.cache_read × input
//	    long_prompt:                # optional: the prices of a call whose prompt is longer
//	      threshold_tokens: 100000  # input + cache writes + cache reads over this
//	      input: 6                  # and output, cache_*: as above
//	      output: 22.50
//	factors:                      # optional; these are the defaults (DefaultFactors)
//	  cache_write: 1.25
//	  cache_write_1h: 2
//	  cache_read: 0.1
//	  batch: 0.5                  # usage.service_tier batch: half the token cost
//	web_search_per_1000: 10       # optional; USD per 1,000 web searches
//
// It is read as the policies are (internal/yamldoc: one document, plain keys, each known and
// given once); unknown keys, duplicate names and missing prices are errors naming the line.
func ParsePrices(b []byte) (*Prices, error) {
	root, err := yamldoc.Read(b)
	if err != nil {
		return nil, err
	}
	if root.Kind != yaml.MappingNode {
		return nil, lineErr(root, "top level must be a mapping with key models")
	}
	p := &Prices{exact: map[string]*PriceEntry{}, named: map[string]*PriceEntry{}, factors: DefaultFactors}
	var modelsNode *yaml.Node
	err = fields(root, "the prices file", []string{"models", "factors", "web_search_per_1000"}, func(key string, k, v *yaml.Node) error {
		switch key {
		case "models":
			modelsNode = v
		case "factors":
			if err := parseFactors(v, &p.factors); err != nil {
				return err
			}
			p.factorsSet = true
		case "web_search_per_1000":
			ws, err := parseWebSearch(v)
			if err != nil {
				return err
			}
			p.factors.WebSearch = ws
			p.factorsSet = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if modelsNode == nil || modelsNode.Kind != yaml.SequenceNode {
		return nil, lineErr(root, "models must be a list")
	}
	for _, n := range modelsNode.Content {
		e, err := parseEntry(n, p.factors)
		if err != nil {
			return nil, err
		}
		if e.Model != "" {
			if old := p.exact[e.Model]; old != nil {
				return nil, lineErr(n, "model %q already priced on line %d", e.Model, old.Line)
			}
			p.exact[e.Model] = e
		} else {
			if old := p.named[e.Prefix]; old != nil {
				return nil, lineErr(n, "prefix %q already priced on line %d", e.Prefix, old.Line)
			}
			p.named[e.Prefix] = e
		}
		p.entries = append(p.entries, e)
	}
	return p, nil
}

func parseEntry(n *yaml.Node, f Factors) (*PriceEntry, error) {
	if n.Kind != yaml.MappingNode {
		return nil, lineErr(n, "each models entry must be a mapping")
	}
	e := &PriceEntry{Line: n.Line}
	seen := map[string]bool{}
	var long *yaml.Node
	err := fields(n, "a models entry", append([]string{"model", "prefix", "long_prompt"}, priceKeys...), func(key string, k, v *yaml.Node) error {
		seen[key] = true
		switch key {
		case "model", "prefix":
			if v.Kind != yaml.ScalarNode || v.Tag != "!!str" || strings.TrimSpace(v.Value) == "" || v.Value != strings.TrimSpace(v.Value) {
				return lineErr(v, "%s must be a non-empty model name", key)
			}
			if key == "model" {
				e.Model = v.Value
			} else {
				e.Prefix = v.Value
			}
		case "long_prompt":
			long = v
		default:
			return parsePriceField(key, v, &e.Price)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	switch {
	case e.Model != "" && e.Prefix != "":
		return nil, lineErr(n, "entry has both model and prefix; use one")
	case e.Model == "" && e.Prefix == "":
		return nil, lineErr(n, "entry needs model or prefix")
	}
	if err := completePrice(n, e.Label(), seen, &e.Price, f); err != nil {
		return nil, err
	}
	if long != nil {
		lp, err := parseLongPrompt(long, e.Label(), f)
		if err != nil {
			return nil, err
		}
		e.LongPrompt = lp
	}
	return e, nil
}

// parseLongPrompt reads an entry's long_prompt: the prices of a call whose prompt is over
// threshold_tokens.
func parseLongPrompt(n *yaml.Node, label string, f Factors) (*LongPrompt, error) {
	if n.Kind != yaml.MappingNode {
		return nil, lineErr(n, "%s: long_prompt must be a mapping of threshold_tokens and prices", label)
	}
	lp := &LongPrompt{}
	seen := map[string]bool{}
	err := fields(n, "long_prompt", append([]string{"threshold_tokens"}, priceKeys...), func(key string, k, v *yaml.Node) error {
		seen[key] = true
		if key == "threshold_tokens" {
			t, err := strconv.ParseInt(v.Value, 10, 64)
			if v.Kind != yaml.ScalarNode || v.Tag != "!!int" || err != nil || t <= 0 {
				return lineErr(v, "threshold_tokens must be a positive whole number of tokens")
			}
			lp.ThresholdTokens = t
			return nil
		}
		return parsePriceField(key, v, &lp.Price)
	})
	if err != nil {
		return nil, err
	}
	if !seen["threshold_tokens"] {
		return nil, lineErr(n, "%s: long_prompt: missing threshold_tokens", label)
	}
	if err := completePrice(n, label+": long_prompt", seen, &lp.Price, f); err != nil {
		return nil, err
	}
	return lp, nil
}

// priceKeys are the price keys of an entry and of its long_prompt.
var priceKeys = []string{"input", "output", "cache_write", "cache_write_1h", "cache_read"}

// parsePriceField reads the price key (one of priceKeys) of an entry or its long_prompt into pr.
func parsePriceField(key string, v *yaml.Node, pr *Price) error {
	dst := map[string]*Money{"input": &pr.Input, "output": &pr.Output, "cache_write": &pr.CacheWrite,
		"cache_write_1h": &pr.CacheWrite1h, "cache_read": &pr.CacheRead}[key]
	if v.Kind != yaml.ScalarNode || (v.Tag != "!!int" && v.Tag != "!!float") {
		return lineErr(v, "%s must be a number of USD per million tokens", key)
	}
	// USD per million tokens with 3 decimals = nano-USD per token.
	n, err := parseDecimal(v.Value, 3)
	if err != nil || n < 0 {
		if err == nil {
			err = errors.New("negative")
		}
		return lineErr(v, "%s %q: %v (USD per million tokens, at most 3 decimals)", key, v.Value, err)
	}
	*dst = Money(n)
	return nil
}

// completePrice checks that input and output were given and fills the cache prices left out from
// the input price by the table's factors.
func completePrice(n *yaml.Node, label string, seen map[string]bool, pr *Price, f Factors) error {
	for _, k := range []string{"input", "output"} {
		if !seen[k] {
			return lineErr(n, "%s: missing %s", label, k)
		}
	}
	if !seen["cache_write"] {
		pr.CacheWrite = f.CacheWrite.apply(pr.Input)
	}
	if !seen["cache_write_1h"] {
		pr.CacheWrite1h = f.CacheWrite1h.apply(pr.Input)
	}
	if !seen["cache_read"] {
		pr.CacheRead = f.CacheRead.apply(pr.Input)
	}
	return nil
}

// fields reads the mapping n as every YAML loader of ctxproxy does (yamldoc.Fields: plain keys,
// known, each once), calling fn with each key in order until one fails. The error is the
// file's first problem, at its line: a bad key's or a bad value's, whichever comes first.
func fields(n *yaml.Node, where string, known []string, fn func(key string, k, v *yaml.Node) error) error {
	var bad error
	badLine := 0
	errs := yamldoc.Fields(n, where, known, func(key string, k, v *yaml.Node) {
		if bad == nil {
			if bad = fn(key, k, v); bad != nil {
				badLine = k.Line
			}
		}
	})
	if len(errs) > 0 && (bad == nil || errs[0].Line < badLine) {
		return errs[0]
	}
	return bad
}

func lineErr(n *yaml.Node, format string, args ...any) error {
	return fmt.Errorf("line %d: %s", n.Line, fmt.Sprintf(format, args...))
}

// Lookup finds the entry pricing model: its exact (model:) entry, else the prefix: entry of the
// model it is or is a dated snapshot of (modelid: claude-sonnet-4-5 prices
// claude-sonnet-4-5-20250929 and claude-sonnet-4-5@20250929, never claude-sonnet-4-50, and
// claude-opus-5 never prices claude-opus-5-5).
func (p *Prices) Lookup(model string) (*PriceEntry, bool) {
	if p == nil || model == "" {
		return nil, false
	}
	if e, ok := p.exact[model]; ok {
		return e, true
	}
	if e, ok := p.named[model]; ok {
		return e, true
	}
	e, ok := p.named[modelid.Base(model)]
	return e, ok
}

// Label is the bounded metrics label for model: its entry's label, else "other".
func (p *Prices) Label(model string) string {
	if e, ok := p.Lookup(model); ok {
		return e.Label()
	}
	return OtherLabel
}

// Models lists the labels of all entries (model names and prefixes) in file order, for
// NewMetrics.
func (p *Prices) Models() []string {
	if p == nil {
		return nil
	}
	out := make([]string, len(p.entries))
	for i, e := range p.entries {
		out[i] = e.Label()
	}
	return out
}

// Entries lists the entries in file order.
func (p *Prices) Entries() []*PriceEntry {
	if p == nil {
		return nil
	}
	return append([]*PriceEntry(nil), p.entries...)
}

// Savings is cleared input tokens at the input price: what a measured compaction spared.
func (pr Price) Savings(cleared int64) Money { return pr.Input.Times(cleared) }

// Price fills c.Cost, c.Breakdown, c.Savings, c.Compactions, c.CompactionCost and
// c.PriceUnknown from c.Model, c.Usage, c.Iterations, c.ServiceTier and c.Edits. A model
// without a price (the call's or an iteration's) gets PriceUnknown and zero amounts, which
// reports show as unknown. It is the one place a call's billed cost is made: the ledger writes
// it, and spend caps are charged it (Charge).
func (p *Prices) Price(c *Call) {
	c.Compactions = countCompactions(c.Iterations)
	if !p.priceWith(c, p.Lookup) {
		c.Cost, c.Savings, c.CompactionCost, c.Breakdown, c.PriceUnknown = 0, 0, 0, CostBreakdown{}, true
		c.SavingsGross, c.CachePenalty, c.CacheEffect = 0, 0, settleCacheEffect(c)
		for i := range c.Iterations {
			c.Iterations[i].Cost = 0
		}
		return
	}
	c.PriceUnknown = false
}

// priceWith prices c with the entries lookup finds; false when it finds none for a model the
// call or one of its iterations names.
func (p *Prices) priceWith(c *Call, lookup func(model string) (*PriceEntry, bool)) bool {
	e, ok := lookup(c.Model)
	return ok && p.priceCall(c, e, lookup)
}

// Charge is what a spend cap is charged for c, a call Price has priced: exactly its cost_usd in
// the ledger. A call Price could not price (price_unknown) is charged what Price makes of it with
// every model without a price at the table's dearest (Dearest), so a cap holds for a model
// nobody priced. c is not changed.
func (p *Prices) Charge(c *Call) Money {
	if !c.PriceUnknown {
		return c.Cost
	}
	cp := *c
	cp.Iterations = slices.Clone(c.Iterations)
	dear := &PriceEntry{Price: p.Dearest()}
	p.priceWith(&cp, func(model string) (*PriceEntry, bool) {
		if e, ok := p.Lookup(model); ok {
			return e, true
		}
		return dear, true
	})
	return cp.Cost
}

// Dearest is the price a model without one is held and charged at by the spend caps: each
// token kind at the highest price of any entry (input and cache writes at the highest of the
// three), so a cap holds for a model nobody priced.
func (p *Prices) Dearest() Price {
	var d Price
	for _, e := range p.Entries() {
		pr := e.Ceiling()
		d.Input = max(d.Input, pr.Input, pr.CacheWrite, pr.CacheWrite1h)
		d.Output = max(d.Output, pr.Output)
	}
	d.CacheWrite, d.CacheWrite1h, d.CacheRead = d.Input, d.Input, d.Input
	return d
}
