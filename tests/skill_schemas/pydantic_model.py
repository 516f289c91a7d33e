import json, datetime, uuid, enum
from typing import Optional, Literal, Union, List
from pydantic import BaseModel, Field

class Priority(str, enum.Enum):
    low = "low"
    high = "high"

class Address(BaseModel):
    street: str = Field(min_length=1)
    city: str

class Node(BaseModel):
    name: str
    children: List["Node"] = []

class Cat(BaseModel):
    kind: Literal["cat"]
    lives: int = Field(ge=0, le=9)

class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool = True

class Ticket(BaseModel):
    id: uuid.UUID
    title: str = Field(max_length=80, description="One line")
    created: datetime.datetime
    due: Optional[datetime.date] = None
    priority: Priority = Priority.low
    address: Address
    tree: Node
    pet: Union[Cat, Dog] = Field(discriminator="kind")
    tags: List[str] = Field(default_factory=list, max_length=5)
    site: Optional[str] = Field(default=None, json_schema_extra={"format": "uri"})

print(json.dumps(Ticket.model_json_schema(), indent=1))
