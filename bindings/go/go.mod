module github.com/libfusednorm/libfusednorm/bindings/go

go 1.24
