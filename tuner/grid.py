"""The finite grid that the default sampler (sampler.py) searches: each configuration a point, the
tuple of its values' positions in the parameters' ordered domains. The grid knows which points
are valid (asking the space once per point), their neighbours, and a pool of valid points found
by random draws."""
import numpy as np

# Random draws per growth of the pool of points known to be valid.
POOL_DRAWS = 2000
# Random draws allowed per search for a valid point anywhere (most combinations may be invalid).
MAX_DRAWS = 50_000


class Grid:
    """The configurations of ordered `domains` (name -> values) as points; `valid(values)` (a tuple
    of values in `domains` order) says whether a configuration is valid."""

    def __init__(self, domains: dict[str, tuple], valid):
        self.domains = {name: tuple(domain) for name, domain in domains.items()}
        self.sizes = np.array([len(domain) for domain in self.domains.values()])
        self.positions = [{value: index for index, value in enumerate(domain)} for domain in self.domains.values()]
        self.test = valid  # the space's test of a configuration, asked once per point
        self.verdicts = {}  # point -> its test's verdict
        self.adjacent = {}  # (point, wide, doubling and not wide) -> its valid neighbours
        self.radix = np.cumprod(np.concatenate(([1], self.sizes[:-1])))
        self.pool = np.empty((0, len(self.sizes)), dtype=int)  # valid points found by random draws
        self.pool_codes = np.empty(0, dtype=int)
        self.drawn_codes = np.empty(0, dtype=int)  # every point drawn for the pool, valid or not
        self.barren = -1  # how many points were seen when a search found no unseen valid one

    def point(self, params: dict) -> tuple | None:
        """The point of a configuration given as parameter values; None if it is off the grid."""
        try:
            return tuple(position[params[name]] for name, position in zip(self.domains, self.positions))
        except (KeyError, TypeError):
            return None

    def params(self, point: tuple) -> dict:
        """The configuration at `point`, as parameter values."""
        return {name: domain[index] for (name, domain), index in zip(self.domains.items(), point)}

    def valid(self, point: tuple) -> bool:
        """Whether the configuration at `point` is valid (the space's test, asked once)."""
        if point not in self.verdicts:
            values = tuple(domain[index] for domain, index in zip(self.domains.values(), point))
            self.verdicts[point] = bool(self.test(values))
        return self.verdicts[point]

    def anywhere(self, seen: set, count: int, rng: np.random.Generator) -> list[tuple]:
        """Up to `count` distinct unseen valid points drawn uniformly (by rejection). Once
        MAX_DRAWS draws find none, none is sought again until more are seen."""
        if self.barren == len(seen):
            return []
        found, drawn, batch = {}, 0, 16 * count
        while len(found) < count and drawn < MAX_DRAWS:
            for point in map(tuple, rng.integers(self.sizes, size=(batch, len(self.sizes))).tolist()):
                if point not in seen and point not in found and self.valid(point):
                    found[point] = None
                    if len(found) == count:
                        break
            drawn, batch = drawn + batch, min(2 * batch, MAX_DRAWS)
        if not found:
            self.barren = len(seen)
        return list(found)

    def unseen_pool(self, seen: set, most: int, rng: np.random.Generator) -> np.ndarray:
        """The pool's unseen points, once it has grown: a uniform sample of `most` of them at most."""
        self._grow_pool(rng)
        codes = np.array(list(seen), dtype=int).reshape(-1, len(self.sizes)) @ self.radix
        candidates = self.pool[~np.isin(self.pool_codes, codes)]
        if len(candidates) > most:
            candidates = candidates[rng.choice(len(candidates), most, replace=False)]
        return candidates

    def _grow_pool(self, rng: np.random.Generator) -> None:
        """Draw POOL_DRAWS points at random; those never drawn before are tested, and the valid
        ones join the pool."""
        drawn = rng.integers(self.sizes, size=(POOL_DRAWS, len(self.sizes)))
        codes, first = np.unique(drawn @ self.radix, return_index=True)
        new = ~np.isin(codes, self.drawn_codes)
        self.drawn_codes = np.concatenate((self.drawn_codes, codes[new]))
        fresh = [point for point in drawn[first[new]] if self.valid(tuple(int(index) for index in point))]
        if fresh:
            self.pool = np.concatenate((self.pool, fresh))
            self.pool_codes = self.pool @ self.radix

    def neighbourhood(self, ranked: np.ndarray, seen: set, wide: bool, expanded: int, doubling: bool) -> list[tuple]:
        """The unseen neighbours (wide ones if `wide`; with `doubling`, near ones include twice or
        half a numeric value) of the first `expanded` points of `ranked` that have any."""
        found, count = {}, 0
        for point in ranked:
            unseen = [neighbour for neighbour in self.neighbours(tuple(int(index) for index in point), wide, doubling)
                      if neighbour not in seen]
            if unseen:
                found.update(dict.fromkeys(unseen))
                count += 1
                if count == expanded:
                    break
        return list(found)

    def neighbours(self, point: tuple, wide: bool, doubling: bool = False) -> list[tuple]:
        """The valid points that differ from `point` in one parameter: by one step of its ordered
        domain or, with `doubling`, to twice or half its value; or if `wide` by any other value."""
        key = (point, wide, doubling and not wide)
        if key in self.adjacent:
            return self.adjacent[key]
        found = self.adjacent[key] = []
        for dimension, (size, domain) in enumerate(zip(self.sizes, self.domains.values())):
            index = point[dimension]
            moves = set(range(size)) if wide else {index - 1, index + 1}
            if doubling and not wide and _numeric(domain[index]):
                moves |= {self.positions[dimension].get(domain[index] * factor, -1) for factor in (2, 0.5)}
            for other in sorted(moves):
                if 0 <= other < size and other != index:
                    moved = point[:dimension] + (other,) + point[dimension + 1:]
                    if self.valid(moved):
                        found.append(moved)
        return found


def _numeric(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value != 0
