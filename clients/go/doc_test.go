package analytics

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// Every exported name of the package — types, functions, methods,
// constants, variables and struct fields — has a doc comment.
func TestDocComments(t *testing.T) {
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	missing := func(pos token.Pos, name string) {
		t.Errorf("%s: %s has no doc comment", fset.Position(pos), name)
	}
	for _, f := range files {
		{
			for _, decl := range f.Decls {
				switch d := decl.(type) {
				case *ast.FuncDecl:
					if d.Name.IsExported() && d.Doc == nil {
						missing(d.Pos(), d.Name.Name)
					}
				case *ast.GenDecl:
					for _, spec := range d.Specs {
						switch s := spec.(type) {
						case *ast.TypeSpec:
							if !s.Name.IsExported() {
								continue
							}
							if s.Doc == nil && d.Doc == nil {
								missing(s.Pos(), s.Name.Name)
							}
							if st, ok := s.Type.(*ast.StructType); ok {
								for _, field := range st.Fields.List {
									for _, n := range field.Names {
										if n.IsExported() && field.Doc == nil && field.Comment == nil {
											missing(n.Pos(), s.Name.Name+"."+n.Name)
										}
									}
								}
							}
							if it, ok := s.Type.(*ast.InterfaceType); ok {
								for _, m := range it.Methods.List {
									for _, n := range m.Names {
										if n.IsExported() && m.Doc == nil && m.Comment == nil {
											missing(n.Pos(), s.Name.Name+"."+n.Name)
										}
									}
								}
							}
						case *ast.ValueSpec:
							for _, n := range s.Names {
								ungroupedDoc := d.Lparen == token.NoPos && d.Doc != nil
								if n.IsExported() && s.Doc == nil && s.Comment == nil && !ungroupedDoc {
									missing(n.Pos(), n.Name)
								}
							}
						}
					}
				}
			}
		}
	}
}
