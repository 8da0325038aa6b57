package tokens

import (
	_ "embed"
	"errors"
	"fmt"
	"io/fs"
	"sync"
)

// builtinPricesYAML is the list price table shipped in the binary. Its rows are the public
// pricing page's, https://platform.claude.com/docs/en/about-claude/pricing (see the file's
// header for the sources of each row).
//
//go:embed builtin_prices.yaml
var builtinPricesYAML []byte

var builtinPrices = sync.OnceValues(func() (*Prices, error) { return ParsePrices(builtinPricesYAML) })

// BuiltinPrices is the list price table compiled into the binary: the prices in force when no
// prices.yaml overrides them. A test holds it parseable.
func BuiltinPrices() *Prices {
	p, err := builtinPrices()
	if err != nil {
		panic(fmt.Sprintf("tokens: built-in price table: %v", err))
	}
	return p
}

// BuiltinPricesYAML is the built-in table's source, in the prices.yaml schema.
func BuiltinPricesYAML() []byte { return append([]byte(nil), builtinPricesYAML...) }

// Over returns the table of p with o over it: an entry of o replaces p's entry of the same
// model or prefix, o's other entries are added, and o's factors apply when its file set any.
// Neither table is changed.
func (p *Prices) Over(o *Prices) *Prices {
	out := &Prices{exact: map[string]*PriceEntry{}, named: map[string]*PriceEntry{}, factors: p.factors, factorsSet: p.factorsSet}
	if o.factorsSet {
		out.factors, out.factorsSet = o.factors, true
	}
	replaced := map[string]*PriceEntry{}
	for _, e := range o.entries {
		replaced[e.key()] = e
	}
	for _, e := range p.entries {
		if r, ok := replaced[e.key()]; ok {
			out.add(r)
			delete(replaced, e.key())
			continue
		}
		out.add(e)
	}
	for _, e := range o.entries {
		if _, ok := replaced[e.key()]; ok {
			out.add(e)
		}
	}
	return out
}

// key tells entries apart: an exact model and a prefix of the same name are two entries.
func (e *PriceEntry) key() string {
	if e.Model != "" {
		return "model:" + e.Model
	}
	return "prefix:" + e.Prefix
}

func (p *Prices) add(e *PriceEntry) {
	if e.Model != "" {
		p.exact[e.Model] = e
	} else {
		p.named[e.Prefix] = e
	}
	p.entries = append(p.entries, e)
}

// PriceTable is the table in force and where it came from.
type PriceTable struct {
	*Prices
	// File is the prices file laid over the built-in table; "" when there is none.
	File string
	// Overridden and Added count the file's entries that replaced a built-in one or were new.
	Overridden, Added int
}

// Describe says which table is in force, for logs and `ctxproxy validate`.
func (t PriceTable) Describe(file string) string {
	if t.File == "" {
		return fmt.Sprintf("built-in price table (%d entries)", len(t.entries))
	}
	return fmt.Sprintf("built-in price table with %s over it (%d entries overridden, %d added)", file, t.Overridden, t.Added)
}

// OpenPrices is the price table for a prices file at path laid over the built-in table. A
// missing file is fine unless required (the operator named it with --prices): then the built-in
// table alone is in force. A file that is there must parse.
func OpenPrices(path string, required bool) (PriceTable, error) {
	base := BuiltinPrices()
	if path == "" {
		return PriceTable{Prices: base}, nil
	}
	o, err := LoadPrices(path)
	if err != nil {
		if !required && errors.Is(err, fs.ErrNotExist) {
			return PriceTable{Prices: base}, nil
		}
		return PriceTable{}, err
	}
	t := PriceTable{Prices: base.Over(o), File: path}
	for _, e := range o.entries {
		if _, ok := base.entry(e.key()); ok {
			t.Overridden++
		} else {
			t.Added++
		}
	}
	return t, nil
}

// entry finds the entry with key k.
func (p *Prices) entry(k string) (*PriceEntry, bool) {
	for _, e := range p.entries {
		if e.key() == k {
			return e, true
		}
	}
	return nil, false
}
