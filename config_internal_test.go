package toolgate

import (
	"context"
	"crypto/ed25519"
	"io/fs"
	"log/slog"
	"reflect"
	"testing"
	"testing/fstest"

	"github.com/toolgate/toolgate/agenttool"
	"github.com/toolgate/toolgate/deferred"
)

// facadeOnly are the fields of Config that New and Start use themselves
// and do not hand to the engine.
var facadeOnly = map[string]bool{"Agent": true, "AgentDir": true, "SetUp": true, "APIToken": true}

type stubModel struct{}

func (stubModel) Name() string { return "stub" }
func (stubModel) Request(context.Context, ModelRequest) (ModelResponse, error) {
	return ModelResponse{}, nil
}

// nonZero is a value of t that is not its zero value.
func nonZero(t *testing.T, typ reflect.Type) reflect.Value {
	t.Helper()
	special := map[reflect.Type]any{
		reflect.TypeFor[Model]():                        stubModel{},
		reflect.TypeFor[fs.FS]():                        fstest.MapFS{},
		reflect.TypeFor[*slog.Logger]():                 slog.New(slog.DiscardHandler),
		reflect.TypeFor[func(string) (string, bool)]():  func(string) (string, bool) { return "", false },
		reflect.TypeFor[map[string]ed25519.PublicKey](): map[string]ed25519.PublicKey{"ann": make(ed25519.PublicKey, ed25519.PublicKeySize)},
		reflect.TypeFor[[]agenttool.Handler](): []agenttool.Handler{agenttool.HandlerFunc(func(*agenttool.RunContext, *deferred.Requests) (*deferred.Results, error) {
			return nil, nil
		})},
	}
	if v, ok := special[typ]; ok {
		return reflect.ValueOf(v)
	}
	switch typ.Kind() {
	case reflect.String:
		return reflect.ValueOf("x").Convert(typ)
	case reflect.Bool:
		return reflect.ValueOf(true)
	case reflect.Int, reflect.Int64:
		return reflect.ValueOf(7).Convert(typ)
	case reflect.Slice:
		return reflect.MakeSlice(typ, 1, 1)
	case reflect.Interface:
		return reflect.ValueOf("deps")
	}
	t.Fatalf("no non-zero value for %s: add one", typ)
	return reflect.Value{}
}

// Every field of Config reaches the engine's config under its own name,
// but those the façade keeps: a field added to Config and not carried
// fails here.
func TestEngineConfigCarriesEveryField(t *testing.T) {
	t.Parallel()
	var cfg Config
	cv := reflect.ValueOf(&cfg).Elem()
	for i := range cv.NumField() {
		cv.Field(i).Set(nonZero(t, cv.Type().Field(i).Type))
	}
	tool, err := agenttool.New("t", "", func(*agenttool.RunContext, struct{}) (int, error) { return 0, nil })
	if err != nil {
		t.Fatal(err)
	}
	cfg.Tools = []agenttool.Tool{tool}
	ev := reflect.ValueOf(cfg.engine(nil, nil, cfg.Logger))
	for i := range cv.NumField() {
		f := cv.Type().Field(i)
		if facadeOnly[f.Name] {
			if ev.FieldByName(f.Name).IsValid() && !ev.FieldByName(f.Name).IsZero() {
				t.Errorf("%s is the façade's, yet the engine's config has it set", f.Name)
			}
			continue
		}
		got := ev.FieldByName(f.Name)
		if !got.IsValid() {
			t.Errorf("Config.%s: the engine's config has no field of that name", f.Name)
			continue
		}
		if got.IsZero() {
			t.Errorf("Config.%s is not carried to the engine", f.Name)
			continue
		}
		want := cv.Field(i)
		if got.Type() == want.Type() && got.Kind() != reflect.Func && !reflect.DeepEqual(got.Interface(), want.Interface()) {
			t.Errorf("Config.%s = %v reaches the engine as %v", f.Name, want, got)
		}
	}
	if n := ev.FieldByName("Tools").Len(); n != 1 {
		t.Errorf("engine has %d tools, want 1", n)
	}
}
