module github.com/hookrelay/hookrelay/tools/bench/goclient

go 1.22

replace github.com/hookrelay/hookrelay/clients/go => ../../../clients/go

require (
	github.com/hookrelay/hookrelay/clients/go v0.0.0-00010101000000-000000000000
	github.com/segmentio/analytics-go/v3 v3.3.0
)

require (
	github.com/bmizerany/assert v0.0.0-20160611221934-b7ed37b82869 // indirect
	github.com/google/uuid v1.3.0 // indirect
	github.com/kr/pretty v0.3.1 // indirect
	github.com/segmentio/backo-go v1.0.0 // indirect
)
