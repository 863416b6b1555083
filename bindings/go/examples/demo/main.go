// SPDX-License-Identifier: Apache-2.0

// The Go binding's demo, each part checked against a float64 reference on
// the host: LayerNorm forward + backward (fp32), and BatchNorm + Add + ReLU
// (fp16 channels-last, forward + backward with the 1-bit ReLU mask in the
// reserve space). `go run ./examples/demo` runs both; naming parts
// (`layernorm`, `batchnorm`) runs those. Exits non-zero on a mismatch, or
// without a GPU (saying so).
package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"

	"github.com/libfusednorm/libfusednorm/bindings/go"
	"github.com/libfusednorm/libfusednorm/bindings/go/devmem"
)

// The parts: each runs on the handle it is given and returns what it checked.
var parts = []struct {
	name string
	run  func(*fusednorm.Handle) (string, error)
}{
	{"layernorm", layerNorm},
	{"batchnorm", batchNormAddReLU},
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(names []string) error {
	known := make([]string, len(parts))
	for i, p := range parts {
		known[i] = p.name
	}
	for _, n := range names {
		if !slices.Contains(known, n) {
			return fmt.Errorf("no part %q (the parts: %s)", n, strings.Join(known, ", "))
		}
	}
	if err := devmem.Available(); err != nil {
		return fmt.Errorf("needs a CUDA GPU: %w", err)
	}
	h, err := fusednorm.NewHandle()
	if err != nil {
		return err
	}
	defer h.Close()
	for _, p := range parts {
		if len(names) > 0 && !slices.Contains(names, p.name) {
			continue
		}
		what, err := p.run(h)
		if err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		fmt.Println(what)
	}
	return nil
}

// n normal values of the given mean and standard deviation, as float32.
func normals(rng *rand.Rand, n int, mean, std float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(mean + std*rng.NormFloat64())
	}
	return v
}
