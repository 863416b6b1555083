module fusednorm

go 1.24
