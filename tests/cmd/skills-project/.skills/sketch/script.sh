echo adapt me
