package bench

import (
	"fmt"
	"slices"
)

// RegressionThreshold is the relative change for the worse that Compare
// flags.
const RegressionThreshold = 0.10

// Regression is a figure that got worse than in the previous results by
// more than the threshold.
type Regression struct {
	Name    string `json:"name"`
	Metric  string `json:"metric"`
	Workers int    `json:"workers"`
	Batch   int    `json:"batch"`
	// Side is "raw", "toolgate" or "floor". A raw or floor regression
	// alone means the machine was slower, not toolgate.
	Side     string  `json:"side"`
	Previous float64 `json:"previous"`
	Current  float64 `json:"current"`
	// Worse is the relative change for the worse: 0.25 is 25 % worse.
	Worse float64 `json:"worse"`
}

func (r Regression) String() string {
	return fmt.Sprintf("%s %s (%s): %s -> %s, %.0f %% worse",
		r.Name, r.Metric, r.Side, fmtNum(r.Previous), fmtNum(r.Current), 100*r.Worse)
}

// higherIsBetter says which way a metric improves; every metric not
// listed improves downwards (latency, bytes, seconds, allocations).
func higherIsBetter(metric string) bool {
	switch metric {
	case MetricThroughput, MetricCallsPerSecond, MetricResumeRateInCache, MetricResumeRateCold, MetricColdOverInCache, MetricColdLogReads:
		return true
	}
	return false
}

// Compare returns the figures of cur that are worse than the same figure
// (same name, metric, workers, batch and side) of prev by more than
// threshold, in cur's row order. Figures missing on either side are not
// compared.
func Compare(prev, cur *Results, threshold float64) []Regression {
	if prev == nil || cur == nil {
		return nil
	}
	old := make(map[string]Row, len(prev.Cases))
	for _, r := range prev.Cases {
		old[r.key()] = r
	}
	var out []Regression
	for _, r := range cur.Cases {
		p, ok := old[r.key()]
		if !ok {
			continue
		}
		for _, side := range []struct {
			name      string
			prev, cur *float64
		}{
			{"raw", p.Raw, r.Raw},
			{"toolgate", p.Toolgate, r.Toolgate},
			{"floor", p.Floor, r.Floor},
		} {
			if side.prev == nil || side.cur == nil || *side.prev <= 0 {
				continue
			}
			worse := (*side.cur - *side.prev) / *side.prev
			if higherIsBetter(r.Metric) {
				worse = -worse
			}
			if worse > threshold {
				out = append(out, Regression{
					Name: r.Name, Metric: r.Metric, Workers: r.Workers, Batch: r.Batch,
					Side: side.name, Previous: *side.prev, Current: *side.cur, Worse: worse,
				})
			}
		}
	}
	return out
}

// toolgateRegressions are the regressions on the side toolgate controls.
func toolgateRegressions(rs []Regression) []Regression {
	return slices.DeleteFunc(slices.Clone(rs), func(r Regression) bool { return r.Side != "toolgate" })
}
