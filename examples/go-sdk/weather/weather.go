// Package weather is a tool served by a toolgate worker: a typed Go
// function whose JSON Schema toolgate derives from Args.
package weather

import (
	"context"
	"strings"

	"github.com/toolgate/toolgate/worker"
)

// Args are what the model passes.
type Args struct {
	City string `json:"city" jsonschema:"description=The city, e.g. Paris"`
	Unit string `json:"unit,omitempty" jsonschema:"enum=celsius,enum=fahrenheit"`
}

// Forecast is the tool's result.
type Forecast struct {
	City    string  `json:"city"`
	Temp    float64 `json:"temp"`
	Unit    string  `json:"unit"`
	Summary string  `json:"summary"`
}

// temps stands in for a weather service.
var temps = map[string]float64{"paris": 21, "oslo": 4, "cairo": 35}

// Get answers a call. A city it does not know is the model's mistake: it
// is told so and may try again.
func Get(_ context.Context, _ worker.Call, a Args) (Forecast, error) {
	t, ok := temps[strings.ToLower(a.City)]
	if !ok {
		return Forecast{}, worker.Retry("no weather for %q; try Paris, Oslo or Cairo", a.City)
	}
	unit := a.Unit
	if unit == "" {
		unit = "celsius"
	}
	if unit == "fahrenheit" {
		t = t*9/5 + 32
	}
	return Forecast{City: a.City, Temp: t, Unit: unit, Summary: "sunny"}, nil
}

// Register adds the get_weather tool to w.
func Register(w *worker.Worker) error {
	return worker.Register(w, "get_weather", "Current weather of a city.", Get)
}
