package gateway_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"sort"
	"strings"
	"testing"
)

// maxExported bounds what package gateway exports (issue 23: 138 names
// before the views moved to opsview, 74 after). The same round added two
// operator surfaces, each a gateway action with its audit event: tasks
// (OpenTask, GetTask, ClaimTask, RunTask, EndTask, CancelTask, TaskView,
// TaskKeep, ErrNoTasks, ChannelTask) and upstream connections
// (Connection, Connections, Revoked, ErrNoConnection, ListConnections,
// RevokeConnection, SetConnections): 91. Then DueTasks, the list a
// server's sweeper acts on (so that a decided task runs unpolled), and the
// console's Connect on its Connections page (issue 28), ConsentServers and
// StartConnection: 94. Then Orphan, the journal's answer that a task left
// by a dead runner ends with (the server writes it as the runner would
// have): 95. A new view belongs in opsview, a
// helper no other package needs stays unexported; raise the bound only
// for a name a front end or an embedder cannot do without.
const maxExported = 95

// TestExportedNames counts the package's exported names as go/ast sees
// them in its non-test files: every exported package-level name (each
// name of a const or var spec) and every exported method of an exported
// type.
func TestExportedNames(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, e := range entries {
		if n := e.Name(); strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
			f, err := parser.ParseFile(fset, n, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
	}
	names := exportedNames(files)
	if len(names) == 0 {
		t.Fatal("no exported names found: the count reads nothing")
	}
	if len(names) > maxExported {
		t.Errorf("gateway exports %d names, at most %d (a view belongs in opsview):\n%s", len(names), maxExported, strings.Join(names, "\n"))
	}
}

func exportedNames(files []*ast.File) []string {
	var out []string
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil {
					out = append(out, d.Name.Name)
					continue
				}
				typ := d.Recv.List[0].Type
				if s, ok := typ.(*ast.StarExpr); ok {
					typ = s.X
				}
				if id, ok := typ.(*ast.Ident); ok && id.IsExported() {
					out = append(out, id.Name+"."+d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							out = append(out, s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								out = append(out, n.Name)
							}
						}
					}
				}
			}
		}
	}
	sort.Strings(out)
	return out
}
