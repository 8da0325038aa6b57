package tokens

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Money is an amount in nano-USD (1e-9 USD). Prices are kept to $0.001 per million tokens,
// which is exactly 1 nano-USD per token, so every cost is an exact integer: no float drift
// when thousands of calls are summed.
type Money int64

// NanosPerUSD is the number of Money units in one US dollar.
const NanosPerUSD = 1_000_000_000

// MaxMoney and MinMoney are where Times and Plus stop instead of wrapping around.
const (
	MaxMoney = Money(math.MaxInt64)
	MinMoney = Money(math.MinInt64)
)

// Times is n units at m each (tokens at a price per token). An amount past int64 saturates at
// MaxMoney (MinMoney when negative) instead of wrapping to the other sign: a hold or a cost
// built from a hostile or careless count can be too large, never negative.
func (m Money) Times(n int64) Money {
	if m == 0 || n == 0 {
		return 0
	}
	p := int64(m) * n
	if p/n != int64(m) || (n == -1 && m == MinMoney) || (m == -1 && n == math.MinInt64) {
		if (m < 0) != (n < 0) {
			return MinMoney
		}
		return MaxMoney
	}
	return Money(p)
}

// Plus is m + o, saturating like Times.
func (m Money) Plus(o Money) Money {
	s := m + o
	switch {
	case m > 0 && o > 0 && s < 0:
		return MaxMoney
	case m < 0 && o < 0 && s >= 0:
		return MinMoney
	}
	return s
}

// USD is m as a float, for Prometheus counters and display only.
func (m Money) USD() float64 { return float64(m) / NanosPerUSD }

// String renders m exactly in dollars with at least two decimals: "0.000075", "12.50", "-1.00".
func (m Money) String() string {
	var b []byte
	return string(m.appendDecimal(b, -1))
}

// Fixed renders m in dollars rounded half away from zero to decimals (0..9) digits.
func (m Money) Fixed(decimals int) string {
	if decimals < 0 || decimals > 9 {
		decimals = 9
	}
	return string(m.appendDecimal(nil, decimals))
}

// twoDigits are the decimal pairs 00 to 99, for writing a number two digits a step.
const twoDigits = "00010203040506070809" + "10111213141516171819" + "20212223242526272829" +
	"30313233343536373839" + "40414243444546474849" + "50515253545556575859" +
	"60616263646566676869" + "70717273747576777879" + "80818283848586878889" + "90919293949596979899"

func (m Money) appendDecimal(b []byte, decimals int) []byte {
	v := int64(m)
	neg := v < 0
	u := uint64(v)
	if neg {
		u = uint64(-v)
	}
	if decimals >= 0 {
		unit := uint64(1)
		for i := decimals; i < 9; i++ {
			unit *= 10
		}
		u = (u + unit/2) / unit * unit
	}
	whole, frac := u/NanosPerUSD, uint32(u%NanosPerUSD)
	if neg && u != 0 {
		b = append(b, '-')
	}
	b = strconv.AppendUint(b, whole, 10)
	// The nine digits of the fraction, zero-padded, two a step: every ledger line formats
	// four or five amounts (fmt would allocate, a digit a step cost 6% of a file append).
	var nine [9]byte
	nine[8] = byte('0' + frac%10)
	frac /= 10
	for i := 7; i > 0; i -= 2 {
		r := frac % 100
		frac /= 100
		nine[i-1], nine[i] = twoDigits[2*r], twoDigits[2*r+1]
	}
	n := decimals
	if decimals < 0 {
		// Trailing zeros go, but cents stay: the dropped digits were zeros.
		for n = len(nine); n > 2 && nine[n-1] == '0'; n-- {
		}
	}
	if n > 0 {
		b = append(b, '.')
		b = append(b, nine[:n]...)
	}
	return b
}

// MarshalJSON writes m as an exact JSON number of dollars.
func (m Money) MarshalJSON() ([]byte, error) { return m.appendDecimal(nil, -1), nil }

// UnmarshalJSON reads a JSON number (or string) of dollars exactly.
func (m *Money) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if s == "null" {
		*m = 0
		return nil
	}
	v, err := ParseMoney(s)
	if err != nil {
		return err
	}
	*m = v
	return nil
}

var errMoneySyntax = errors.New("not a decimal number")

// ParseMoney parses a decimal amount of dollars with at most 9 fractional digits
// ("12.5", "0.000075", "-3"). Exponents are refused: amounts are written out.
func ParseMoney(s string) (Money, error) {
	n, err := parseDecimal(s, 9)
	if err != nil {
		return 0, fmt.Errorf("parse amount %q: %w", s, err)
	}
	return Money(n), nil
}

// parseDecimal parses s as a decimal scaled by 10^scale, refusing more fractional digits.
func parseDecimal(s string, scale int) (int64, error) {
	neg := false
	switch {
	case strings.HasPrefix(s, "-"):
		neg, s = true, s[1:]
	case strings.HasPrefix(s, "+"):
		s = s[1:]
	}
	whole, frac, hasDot := strings.Cut(s, ".")
	if whole == "" && frac == "" || hasDot && frac == "" && whole == "" {
		return 0, errMoneySyntax
	}
	if len(frac) > scale {
		return 0, fmt.Errorf("more than %d decimal places", scale)
	}
	for _, part := range []string{whole, frac} {
		for i := 0; i < len(part); i++ {
			if part[i] < '0' || part[i] > '9' {
				return 0, errMoneySyntax
			}
		}
	}
	digits := whole + frac + strings.Repeat("0", scale-len(frac))
	digits = strings.TrimLeft(digits, "0")
	if digits == "" {
		return 0, nil
	}
	v, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("out of range")
	}
	if neg {
		v = -v
	}
	return v, nil
}
