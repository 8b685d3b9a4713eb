module github.com/hookrelay/hookrelay/clients/go

go 1.22
