const { z } = require("zod");

const Address = z.object({ street: z.string().min(1), city: z.string() });
const Node = z.object({ name: z.string(), get children() { return z.array(Node).optional(); } });
const Ticket = z.object({
  id: z.string().uuid(),
  email: z.string().email(),
  title: z.string().max(80).describe("One line"),
  created: z.string().datetime(),
  site: z.string().url().optional(),
  priority: z.enum(["low", "high"]).default("low"),
  home: Address,
  work: Address.optional(),
  tree: Node,
  pet: z.discriminatedUnion("kind", [
    z.object({ kind: z.literal("cat"), lives: z.number().int().min(0).max(9) }),
    z.object({ kind: z.literal("dog"), good: z.boolean().default(true) }),
  ]),
  tags: z.array(z.string()).max(5).default([]),
});
console.log(JSON.stringify(z.toJSONSchema(Ticket), null, 1));
