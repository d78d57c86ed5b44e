package arch

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// aliasAllowed lists public aliases of internal types that are on their way
// out, as "package.Name"; each entry says where it goes. Empty is the goal.
var aliasAllowed = []string{}

// public reports whether a package of this module is one a program may
// import and read with go doc: not internal, not a command, not an example.
func public(path string) bool {
	if path != module && !strings.HasPrefix(path, module+"/") {
		return false
	}
	rest := strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
	for _, seg := range strings.Split(rest, "/") {
		if seg == "internal" || seg == "cmd" || seg == "examples" || seg == "testdata" {
			return false
		}
	}
	return true
}

func internalPath(path string) bool {
	return strings.Contains(path, "/internal/") || strings.HasSuffix(path, "/internal")
}

// internalAliases lists, as "pkg.Name = internal/path.Type", every exported
// alias of pkg whose right-hand side names a type of an internal package,
// directly or inside a pointer, slice, map, function or struct. A public
// alias hides the type's fields and methods from go doc, and ties the public
// API to code the module may change at will.
func internalAliases(pkg *types.Package) []string {
	var out []string
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		tn, ok := scope.Lookup(name).(*types.TypeName)
		if !ok || !tn.Exported() || !tn.IsAlias() {
			continue
		}
		for _, p := range internalNamed(tn.Type(), map[types.Type]bool{}) {
			out = append(out, pkg.Path()+"."+name+" = "+p)
		}
	}
	return out
}

// internalNamed lists the internal named types t is built from, without
// looking inside named types (their own fields are their package's affair).
func internalNamed(t types.Type, seen map[types.Type]bool) []string {
	if seen[t] {
		return nil
	}
	seen[t] = true
	switch t := t.(type) {
	case *types.Alias:
		return internalNamed(types.Unalias(t), seen)
	case *types.Named:
		var out []string
		if obj := t.Obj(); obj.Pkg() != nil && internalPath(obj.Pkg().Path()) {
			out = append(out, obj.Pkg().Path()+"."+obj.Name())
		}
		for arg := range t.TypeArgs().Types() {
			out = append(out, internalNamed(arg, seen)...)
		}
		return out
	case *types.Pointer:
		return internalNamed(t.Elem(), seen)
	case *types.Slice:
		return internalNamed(t.Elem(), seen)
	case *types.Array:
		return internalNamed(t.Elem(), seen)
	case *types.Chan:
		return internalNamed(t.Elem(), seen)
	case *types.Map:
		return append(internalNamed(t.Key(), seen), internalNamed(t.Elem(), seen)...)
	case *types.Signature:
		var out []string
		for _, tuple := range []*types.Tuple{t.Params(), t.Results()} {
			for v := range tuple.Variables() {
				out = append(out, internalNamed(v.Type(), seen)...)
			}
		}
		return out
	case *types.Struct:
		var out []string
		for f := range t.Fields() {
			out = append(out, internalNamed(f.Type(), seen)...)
		}
		return out
	}
	return nil
}

// exportData maps every package the public packages depend on, themselves
// included, to its compiled export data, and lists the public ones.
func exportData(t *testing.T) (files map[string]string, publics []string) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list packages: %v", err)
	}
	cmd := exec.Command(goBin, "list", "-f", "{{.ImportPath}}", module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	outb, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	for p := range strings.FieldsSeq(string(outb)) {
		if public(p) {
			publics = append(publics, p)
		}
	}
	cmd = exec.Command(goBin, append([]string{"list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}"}, publics...)...)
	stderr.Reset()
	cmd.Stderr = &stderr
	if outb, err = cmd.Output(); err != nil {
		t.Fatalf("go list -export: %v\n%s", err, stderr.String())
	}
	files = map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(outb))
	for sc.Scan() {
		path, file, _ := strings.Cut(sc.Text(), "\t")
		files[path] = file
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return files, publics
}

func TestNoPublicAliasOfInternalType(t *testing.T) {
	files, publics := exportData(t)
	if !slices.Contains(publics, module+"/worker") || !slices.Contains(publics, module+"/agenttool") {
		t.Fatalf("public packages %v: worker and agenttool missing, the test would check too little", publics)
	}
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		if files[path] == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(files[path])
	})
	var found []string
	checked := 0
	for _, path := range publics {
		if files[path] == "" {
			continue // test files only: nothing to export
		}
		pkg, err := imp.Import(path)
		if err != nil {
			t.Fatalf("import %s: %v", path, err)
		}
		checked++
		found = append(found, internalAliases(pkg)...)
	}
	if checked < 8 {
		t.Fatalf("checked %d public packages; expected the module's public surface", checked)
	}
	for _, f := range found {
		name, _, _ := strings.Cut(f, " = ")
		if !slices.Contains(aliasAllowed, name) {
			t.Errorf("%s: a public type must be a type of its own (or an alias of a public one), documented with its fields", f)
		}
	}
}

// The check finds an internal type behind an alias however it is wrapped,
// and leaves aliases of public types and defined types alone.
func TestInternalAliasesFindsThem(t *testing.T) {
	t.Parallel()
	in := types.NewPackage(module+"/internal/agent", "agent")
	tool := types.NewTypeName(token.NoPos, in, "Tool", nil)
	types.NewNamed(tool, types.NewStruct(nil, nil), nil)
	in.Scope().Insert(tool)
	in.MarkComplete()
	pub := types.NewPackage(module+"/wire", "wire")
	call := types.NewTypeName(token.NoPos, pub, "Call", nil)
	types.NewNamed(call, types.NewStruct(nil, nil), nil)
	pub.Scope().Insert(call)
	pub.MarkComplete()

	src := `package agenttool
import (
	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/wire"
)
type (
	Tool      = agent.Tool
	Tools     = []*agent.Tool
	ByName    = map[string]agent.Tool
	Func      = func(wire.Call) (agent.Tool, error)
	Holder    = struct{ T agent.Tool }
	Call      = wire.Call
	Own       agent.Tool
	Calls     = []wire.Call
	unexported = agent.Tool
)
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "agenttool.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	conf := types.Config{Importer: importerFunc(func(path string) (*types.Package, error) {
		switch path {
		case in.Path():
			return in, nil
		case pub.Path():
			return pub, nil
		}
		return nil, fmt.Errorf("no package %s", path)
	})}
	pkg, err := conf.Check(module+"/agenttool", fset, []*ast.File{f}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := internalAliases(pkg)
	at := module + "/internal/agent.Tool"
	want := []string{
		module + "/agenttool.ByName = " + at,
		module + "/agenttool.Func = " + at,
		module + "/agenttool.Holder = " + at,
		module + "/agenttool.Tool = " + at,
		module + "/agenttool.Tools = " + at,
	}
	if !slices.Equal(got, want) {
		t.Errorf("internalAliases:\n got %q\nwant %q", got, want)
	}
	for path, want := range map[string]bool{
		module: true, module + "/worker": true, module + "/internal/agent": false,
		module + "/cmd/toolgate": false, module + "/examples/go-sdk/payments": false, "example.com/other": false,
	} {
		if public(path) != want {
			t.Errorf("public(%q) = %v, want %v", path, !want, want)
		}
	}
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }
