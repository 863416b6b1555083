// SPDX-License-Identifier: Apache-2.0

package fusednorm

// Coverage of the C API: every exported symbol (api/symbols.txt) is reached
// by an exported Go function or method, through a shim wrapper that calls
// it; every enumerator of the header has a Go constant bound to C.FNORM_*.

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// Where each symbol is reached from: "Type.Method" or "Func". The test
// checks both directions against api/symbols.txt and that the Go function
// really calls the symbol (directly or through its gofn_ wrapper).
var symbolUsers = map[string]string{
	"fnorm_get_version":                        "LibraryVersion",
	"fnorm_get_error_string":                   "Status.String",
	"fnorm_status_category":                    "Status.Category",
	"fnorm_get_last_error_message":             "*", // inside every wrapper (shim.c gofn_ret)
	"fnorm_create":                             "NewHandle",
	"fnorm_destroy":                            "Handle.Close",
	"fnorm_get_device":                         "Handle.Device",
	"fnorm_tensor_desc_create":                 "NewTensorDesc",
	"fnorm_tensor_desc_destroy":                "NewTensorDesc", // Close calls the destroy bound here (desc.go)
	"fnorm_tensor_desc_set":                    "TensorDesc.Set",
	"fnorm_tensor_desc_get":                    "TensorDesc.Get",
	"fnorm_tensor_desc_get_elements":           "TensorDesc.Elements",
	"fnorm_norm_desc_create":                   "NewNormDesc",
	"fnorm_norm_desc_destroy":                  "NewNormDesc", // Close calls the destroy bound here (desc.go)
	"fnorm_norm_desc_set":                      "NormDesc.Set",
	"fnorm_norm_desc_get":                      "NormDesc.Get",
	"fnorm_norm_desc_set_flags":                "NormDesc.SetFlags",
	"fnorm_norm_desc_get_flags":                "NormDesc.Flags",
	"fnorm_norm_fwd_workspace_size":            "Handle.NormFwdWorkspaceSize",
	"fnorm_norm_fwd":                           "Handle.NormFwd",
	"fnorm_norm_fwd_quant_workspace_size":      "Handle.NormFwdQuantWorkspaceSize",
	"fnorm_norm_fwd_quant_scale_size":          "Handle.NormFwdQuantScaleSize",
	"fnorm_norm_fwd_quant":                     "Handle.NormFwdQuant",
	"fnorm_norm_bwd_workspace_size":            "Handle.NormBwdWorkspaceSize",
	"fnorm_norm_bwd":                           "Handle.NormBwd",
	"fnorm_batchnorm_desc_create":              "NewBatchNormDesc",
	"fnorm_batchnorm_desc_destroy":             "NewBatchNormDesc", // Close calls the destroy bound here (desc.go)
	"fnorm_batchnorm_desc_set":                 "BatchNormDesc.Set",
	"fnorm_batchnorm_desc_get":                 "BatchNormDesc.Get",
	"fnorm_batchnorm_desc_set_engine":          "BatchNormDesc.SetEngine",
	"fnorm_batchnorm_desc_get_engine":          "BatchNormDesc.Engine",
	"fnorm_batchnorm_desc_set_comm":            "BatchNormDesc.SetComm",
	"fnorm_batchnorm_desc_get_comm":            "BatchNormDesc.Comm",
	"fnorm_batchnorm_fwd_train_workspace_size": "Handle.BatchNormFwdTrainWorkspaceSize",
	"fnorm_batchnorm_reserve_space_size":       "Handle.BatchNormReserveSpaceSize",
	"fnorm_batchnorm_fwd_train":                "Handle.BatchNormFwdTrain",
	"fnorm_batchnorm_fwd_infer_workspace_size": "Handle.BatchNormFwdInferWorkspaceSize",
	"fnorm_batchnorm_fwd_infer":                "Handle.BatchNormFwdInfer",
	"fnorm_batchnorm_bwd_workspace_size":       "Handle.BatchNormBwdWorkspaceSize",
	"fnorm_batchnorm_bwd":                      "Handle.BatchNormBwd",
	"fnorm_groupnorm_desc_create":              "NewGroupNormDesc",
	"fnorm_groupnorm_desc_destroy":             "NewGroupNormDesc", // Close calls the destroy bound here (desc.go)
	"fnorm_groupnorm_desc_set":                 "GroupNormDesc.Set",
	"fnorm_groupnorm_desc_get":                 "GroupNormDesc.Get",
	"fnorm_groupnorm_fwd_workspace_size":       "Handle.GroupNormFwdWorkspaceSize",
	"fnorm_groupnorm_fwd":                      "Handle.GroupNormFwd",
	"fnorm_groupnorm_bwd_workspace_size":       "Handle.GroupNormBwdWorkspaceSize",
	"fnorm_groupnorm_bwd":                      "Handle.GroupNormBwd",
	"fnorm_linear_desc_create":                 "NewLinearDesc",
	"fnorm_linear_desc_destroy":                "NewLinearDesc", // Close calls the destroy bound here (desc.go)
	"fnorm_linear_desc_set":                    "LinearDesc.Set",
	"fnorm_linear_desc_get":                    "LinearDesc.Get",
	"fnorm_linear_aux_size":                    "Handle.LinearAuxSize",
	"fnorm_linear_fwd_workspace_size":          "Handle.LinearFwdWorkspaceSize",
	"fnorm_linear_fwd":                         "Handle.LinearFwd",
	"fnorm_linear_bwd_workspace_size":          "Handle.LinearBwdWorkspaceSize",
	"fnorm_linear_bwd":                         "Handle.LinearBwd",
}

func apiFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "api", name))
	if err != nil {
		t.Fatalf("reading the C API's %s: %v", name, err)
	}
	return string(b)
}

// packageFuncs parses the package's non-test sources: exported functions and
// methods by "Type.Method" / "Func" name, and every C.<name> each references.
func packageFuncs(t *testing.T) (map[string]map[string]bool, map[string]bool) {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	funcs := map[string]map[string]bool{}
	allC := map[string]bool{}
	for _, pkg := range pkgs {
		for _, f := range pkg.Files {
			ast.Inspect(f, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok {
					if id, ok := sel.X.(*ast.Ident); ok && id.Name == "C" {
						allC[sel.Sel.Name] = true
					}
				}
				return true
			})
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || !fd.Name.IsExported() {
					continue
				}
				name := fd.Name.Name
				if fd.Recv != nil {
					typ := fd.Recv.List[0].Type
					if st, ok := typ.(*ast.StarExpr); ok {
						typ = st.X
					}
					name = typ.(*ast.Ident).Name + "." + name
				}
				refs := map[string]bool{}
				ast.Inspect(fd, func(n ast.Node) bool {
					if sel, ok := n.(*ast.SelectorExpr); ok {
						if id, ok := sel.X.(*ast.Ident); ok && id.Name == "C" {
							refs[sel.Sel.Name] = true
						}
					}
					return true
				})
				funcs[name] = refs
			}
		}
	}
	return funcs, allC
}

func TestEverySymbolReachable(t *testing.T) {
	var symbols []string
	for _, l := range strings.Split(apiFile(t, "symbols.txt"), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			symbols = append(symbols, l)
		}
	}
	if len(symbols) < 40 {
		t.Fatalf("only %d symbols read from api/symbols.txt", len(symbols))
	}
	shim, err := os.ReadFile("shim.c")
	if err != nil {
		t.Fatal(err)
	}
	funcs, _ := packageFuncs(t)
	listed := map[string]bool{}
	for _, sym := range symbols {
		listed[sym] = true
		user, ok := symbolUsers[sym]
		if !ok {
			t.Errorf("%s (api/symbols.txt) is not bound: add it to the package and to symbolUsers", sym)
			continue
		}
		if user == "*" {
			if !strings.Contains(string(shim), sym+"(") {
				t.Errorf("%s is not called by shim.c", sym)
			}
			continue
		}
		refs, ok := funcs[user]
		if !ok {
			t.Errorf("%s: the exported Go function %s does not exist", sym, user)
			continue
		}
		wrapper := "gofn_" + strings.TrimPrefix(sym, "fnorm_")
		switch {
		case refs[sym]:
		case refs[wrapper]:
			// The wrapper must exist in shim.c and call the symbol.
			re := regexp.MustCompile(`(?s)fnorm_status_t ` + wrapper + `\([^{]*\{[^}]*\b` + sym + `\(`)
			if !re.Match(shim) {
				t.Errorf("%s: shim.c has no %s calling it", sym, wrapper)
			}
		default:
			t.Errorf("%s: %s calls neither C.%s nor C.%s", sym, user, sym, wrapper)
		}
	}
	for sym := range symbolUsers {
		if !listed[sym] {
			t.Errorf("symbolUsers names %s, which api/symbols.txt does not export", sym)
		}
	}
	t.Logf("%d symbols, each reached through the package", len(symbols))
}

// Every enumerator and constant macro of the header that a Go program needs
// is bound to a Go constant through C.FNORM_* (so the compiler checks the
// value); this fails when the header grows one the package lacks.
func TestEveryEnumeratorBound(t *testing.T) {
	hdr := apiFile(t, "fusednorm.h")
	re := regexp.MustCompile(`(?m)^\s*(FNORM_[A-Z0-9_]+)\s*=\s*-?\d+`)
	var want []string
	for _, m := range re.FindAllStringSubmatch(hdr, -1) {
		want = append(want, m[1])
	}
	want = append(want, "FNORM_MAX_RANK", "FNORM_VERSION")
	if len(want) < 30 {
		t.Fatalf("only %d enumerators found in the header", len(want))
	}
	_, allC := packageFuncs(t)
	var missing []string
	for _, e := range want {
		if !allC[e] {
			missing = append(missing, e)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("header constants with no Go binding: %s", strings.Join(missing, ", "))
	}
	t.Logf("%d header constants bound", len(want))
}
