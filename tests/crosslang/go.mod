module github.com/hookrelay/hookrelay/tests/crosslang

go 1.22

require github.com/hookrelay/hookrelay/clients/go v0.0.0

replace github.com/hookrelay/hookrelay/clients/go => ../../clients/go
