package bench

import (
	"math"
	"slices"
	"time"
)

// Summary condenses a set of latencies.
type Summary struct {
	Count int           `json:"count"`
	Mean  time.Duration `json:"mean_ns"`
	P50   time.Duration `json:"p50_ns"`
	P99   time.Duration `json:"p99_ns"`
	Max   time.Duration `json:"max_ns"`
}

// Summarize sorts ds in place and returns its summary; an empty slice
// gives the zero Summary.
func Summarize(ds []time.Duration) Summary {
	if len(ds) == 0 {
		return Summary{}
	}
	slices.Sort(ds)
	var sum float64
	for _, d := range ds {
		sum += float64(d)
	}
	return Summary{
		Count: len(ds),
		Mean:  time.Duration(sum / float64(len(ds))),
		P50:   Percentile(ds, 50),
		P99:   Percentile(ds, 99),
		Max:   ds[len(ds)-1],
	}
}

// Percentile is the nearest-rank percentile p (0 < p ≤ 100) of sorted:
// the smallest value such that at least p % of the values are less than or
// equal to it. It is always one of the measured values, never an
// interpolation, so a p99 over 100 samples is the 99th smallest. p ≤ 0
// gives the minimum, p > 100 the maximum; an empty slice gives 0.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	// The epsilon keeps float error (99.9 % of 1000 is 999.0000000000001)
	// from pushing the rank one up.
	rank := int(math.Ceil(p/100*float64(n) - 1e-9))
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
